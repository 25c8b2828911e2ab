// A function too short to be attached (3 bytes, no compiler site): hist says so.
__attribute__((noinline)) int tiny(int x) { return x; }
int main(int argc, char** argv) {
  (void)argv;
  return tiny(argc) - argc;
}
