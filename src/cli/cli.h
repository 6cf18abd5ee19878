/* The loopfast command: one file per subcommand and one dispatch table
 * (main.c). What the subcommands share with the benchmarks (the --json
 * flag, the error printer, the option parsers) is bench/common/cmdline.h. */
#ifndef LF_CLI_H
#define LF_CLI_H

#include "cmdline.h"

int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);

/* supervise.c: the seccomp supervisor of `loopfast run`. */
const char *lf_cli_supervise_why(const char *path);
#include <stdbool.h>
/* notify_mainpid: under systemd (NOTIFY_SOCKET), MAINPID= names the program. */
int lf_cli_supervise(const char *path, char **argv, const char *why, bool per_socket, bool notify_mainpid);

#endif
