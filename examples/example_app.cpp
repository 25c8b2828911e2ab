// The bundled example: a small inventory simulation with recursion, classes, threads
// and an exception, built with compiler patch sites (-fpatchable-function-entry=5).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shop {

struct Item {
  std::string name;
  int quantity;
  double price;
};

class Inventory {
 public:
  __attribute__((noinline)) void add(const std::string& name, int quantity, double price) {
    std::lock_guard lock(mu_);
    auto& it = items_[name];
    it.name = name;
    it.quantity += quantity;
    it.price = price;
  }

  __attribute__((noinline)) void take(const std::string& name, int quantity) {
    std::lock_guard lock(mu_);
    auto it = items_.find(name);
    if (it == items_.end() || it->second.quantity < quantity)
      throw std::runtime_error("out of stock: " + name);
    it->second.quantity -= quantity;
  }

  __attribute__((noinline)) double value() const {
    std::lock_guard lock(mu_);
    double total = 0;
    for (const auto& [name, item] : items_) total += item.quantity * item.price;
    return total;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Item> items_;
};

__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) long restock_plan(int days) {
  long plan = 0;
  for (int d = 1; d <= days; ++d) plan += fib(d % 12);
  return plan;
}

__attribute__((noinline)) void worker(Inventory& inv, int id) {
  for (int i = 0; i < 50; ++i) {
    inv.add("widget", 2, 1.5);
    inv.take("widget", 1);
  }
  inv.add("gadget-" + std::to_string(id), id + 1, 4.25);
}

__attribute__((noinline)) bool try_oversell(Inventory& inv) {
  try {
    inv.take("unobtainium", 1);
  } catch (const std::exception& e) {
    std::printf("refused: %s\n", e.what());
    return false;
  }
  return true;
}

}  // namespace shop

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  shop::Inventory inv;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(shop::worker, std::ref(inv), t);
  for (auto& t : pool) t.join();
  std::printf("restock plan: %ld\n", shop::restock_plan(30));
  shop::try_oversell(inv);
  std::printf("inventory value: %.2f\n", inv.value());
  return 0;
}
