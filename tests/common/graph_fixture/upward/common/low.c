int high_value(void);

int low_value(void) { return high_value() + 1; }
