#ifndef Q_H
#define Q_H
struct q_box { int n; };
int q_run(int n);
#endif
