#include "cli.h"

#include <string.h>

int cmd_bench(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{ "latency", cmd_bench_latency },
		{ "udp", cmd_bench_udp },
		{ "app", cmd_bench_app },
		{ "connect", cmd_bench_connect },
	};

	if (argc < 2)
		return lf_cli_error("bench needs a benchmark: latency, udp, app or connect");
	for (unsigned i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return lf_cli_error("unknown benchmark '%s' (latency, udp, app or connect)", argv[1]);
}
