#ifndef P_H
#define P_H
#include "lib/q.h"
int p_run(struct q_box *b);
#endif
