# Function names (src/symbols): demangling, simple names, the glob rule.
utramp_add_gtest(unit_symbols unit symbols_test.cpp)
