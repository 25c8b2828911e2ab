# Site discovery and canonicalisation on the fixture matrix (tests/fixtures/).
utramp_add_gtest(unit_sites_static unit sites_static_test.cpp)
utramp_use_fixtures(unit_sites_static)
utramp_add_gtest(unit_sites_runtime unit sites_runtime_test.cpp)
utramp_use_fixtures(unit_sites_runtime)
