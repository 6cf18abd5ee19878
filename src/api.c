#include "internal.h"
#include "loopfast.h"

#include <errno.h>
#include <string.h>

LF_EXPORT int lf_enable_fast_path(int fd) { (void)fd; return -EOPNOTSUPP; }
LF_EXPORT int lf_fast_path_active(int fd) { (void)fd; return 0; }
LF_EXPORT int lf_set_spin(int fd, unsigned usec) { (void)fd; (void)usec; return -EOPNOTSUPP; }
LF_EXPORT const char *lf_strerror(int err) { return strerror(err < 0 ? -err : err); }
