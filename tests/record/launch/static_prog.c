// A statically linked program (launch_e2e_test.cpp): the agent cannot be loaded into it.
#include <stdio.h>
int main(void) {
  puts("static program ran");
  return 0;
}
