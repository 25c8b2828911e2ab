utramp_add_gtest(unit_patch unit patch_test.cpp)
