#include "cli.h"

int cmd_run(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return lf_cli_error("run is not built yet");
}
