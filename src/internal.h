#ifndef LF_INTERNAL_H
#define LF_INTERNAL_H
#define LF_EXPORT __attribute__((visibility("default")))
#endif
