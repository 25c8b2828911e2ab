// The plugins' dependency, loaded by them by bare name (loader tests).
int ld_dep_value(void) { return 7; }
