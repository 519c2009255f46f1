int x_step(int n);

int y_step(int n) { return n > 0 ? x_step(n - 1) : 1; }
