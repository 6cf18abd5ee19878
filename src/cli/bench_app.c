#include "cli.h"

int cmd_bench_app(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return lf_cli_error("bench app is not built yet");
}
