/* `loopfast bench udp`: the table of server designs (udp_designs.c), read
 * by bench_udp.c. It includes udp.h for struct udp_run; udp.h knows
 * nothing of the table, so the servers do not depend on it. */
#ifndef LF_UDP_DESIGNS_H
#define LF_UDP_DESIGNS_H

#include "udp.h"

#include <stdbool.h>

struct udp_design {
	const char *name;
	bool multi;  /* uses --threads */
	bool rio;
	int (*serve)(struct udp_run *run); /* returns 0 or -errno */
	const char *what;
};

extern const struct udp_design udp_designs[];
extern const unsigned udp_ndesigns;

/* Returns the index in udp_designs[] of the design called `name`, or -1. */
int udp_find_design(const char *name);

#endif
