// The library libcall_caller_fixture.c opens as "$ORIGIN/libcall_dep.so".
int dep_twice(int n) { return 2 * n; }
