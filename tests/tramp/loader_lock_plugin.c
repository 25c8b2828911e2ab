// Loaded and unloaded in a loop by tramp_loader_lock_test.cpp: every dlopen and dlclose
// of it makes the loader announce a change (sites/loader_watch.hpp).
int loader_lock_plugin_value(void) { return 42; }
