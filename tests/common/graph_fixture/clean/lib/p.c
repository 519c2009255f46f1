#include "lib/p.h"

int p_run(struct q_box *b) { return b ? 1 : 0; }
