int y_step(int n);

int x_step(int n) { return n > 0 ? y_step(n - 1) : 0; }
