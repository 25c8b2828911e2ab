// The plugin the host loads from its constructor (loader tests).
__attribute__((noinline)) int ld_ctor_twice(int x) { return 2 * x; }
int ld_ctor_value(int x) { return ld_ctor_twice(x) + 1; }
