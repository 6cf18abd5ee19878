#include "cli.h"

int cmd_bench_udp(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return lf_cli_error("bench udp is not built yet");
}
