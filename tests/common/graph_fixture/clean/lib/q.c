#include "lib/q.h"
#include "lib/p.h"

int q_run(int n) { return p_run(0) + n; }
