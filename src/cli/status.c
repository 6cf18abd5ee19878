#include "cli.h"

int cmd_status(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return lf_cli_error("status is not built yet");
}
