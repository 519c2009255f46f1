int high_value(void) { return 41; }
