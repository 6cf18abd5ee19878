#include "cli.h"

int cmd_bench_latency(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return lf_cli_error("bench latency is not built yet");
}
