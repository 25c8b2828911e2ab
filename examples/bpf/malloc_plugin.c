// A library malloc_target loads with dlopen after it started (twice, unloading it in
// between): malloc_count's plugin program probes plugin_work in it.
__attribute__((noinline)) long plugin_work(long n) { return n * 3 + 1; }
