#ifndef P_H
#define P_H
struct q_box;
int p_run(struct q_box *b);
#endif
