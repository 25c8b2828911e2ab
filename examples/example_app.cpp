// The bundled example: a small order-processing simulation, built with compiler patch
// sites (-fpatchable-function-entry=5) and traced by the README's main job.
//
// It has what a tracer must handle: classes with virtual calls, recursion (a pricing
// tree and a restock plan), worker threads sharing an inventory behind a mutex, and a
// C++ exception thrown through several frames and caught.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace shop {

struct Item {
  std::string name;
  int quantity = 0;
  double price = 0;
};

class OutOfStock : public std::runtime_error {
 public:
  explicit OutOfStock(const std::string& what) : std::runtime_error("out of stock: " + what) {}
};

class Inventory {
 public:
  NOINLINE void add(const std::string& name, int quantity, double price) {
    std::lock_guard lock(mu_);
    auto& it = items_[name];
    it.name = name;
    it.quantity += quantity;
    it.price = price;
  }

  NOINLINE void take(const std::string& name, int quantity) {
    std::lock_guard lock(mu_);
    auto it = items_.find(name);
    if (it == items_.end() || it->second.quantity < quantity) throw OutOfStock(name);
    it->second.quantity -= quantity;
  }

  NOINLINE double price_of(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = items_.find(name);
    return it == items_.end() ? 0.0 : it->second.price;
  }

  NOINLINE double value() const {
    std::lock_guard lock(mu_);
    double total = 0;
    for (const auto& [name, item] : items_) total += item.quantity * item.price;
    return total;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Item> items_;
};

// Discounts form a small class hierarchy: virtual calls through a base pointer.
class Discount {
 public:
  virtual ~Discount() = default;
  virtual double apply(double amount) const = 0;
};

class Percent : public Discount {
 public:
  explicit Percent(double pct) : pct_(pct) {}
  NOINLINE double apply(double amount) const override { return amount * (1.0 - pct_ / 100.0); }

 private:
  double pct_;
};

class Threshold : public Discount {
 public:
  Threshold(double over, double off) : over_(over), off_(off) {}
  NOINLINE double apply(double amount) const override {
    return amount > over_ ? amount - off_ : amount;
  }

 private:
  double over_, off_;
};

// A bundle is a tree of items and sub-bundles: its price is computed recursively.
struct Bundle {
  std::string item;
  int count = 1;
  std::vector<Bundle> parts;
};

NOINLINE double bundle_price(const Inventory& inv, const Bundle& b) {
  double total = b.item.empty() ? 0.0 : inv.price_of(b.item) * b.count;
  for (const auto& p : b.parts) total += bundle_price(inv, p);
  return total;
}

NOINLINE long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

NOINLINE long restock_plan(int days) {
  long plan = 0;
  for (int d = 1; d <= days; ++d) plan += fib(d % 12);
  return plan;
}

struct Order {
  std::string item;
  int quantity;
};

NOINLINE void ship(Inventory& inv, const Order& o) { inv.take(o.item, o.quantity); }

// Throws OutOfStock from two frames down; the caller catches it.
NOINLINE void fulfil(Inventory& inv, const std::vector<Order>& orders) {
  for (const auto& o : orders) ship(inv, o);
}

NOINLINE bool try_fulfil(Inventory& inv, const std::vector<Order>& orders) {
  try {
    fulfil(inv, orders);
  } catch (const OutOfStock& e) {
    std::printf("refused: %s\n", e.what());
    return false;
  }
  return true;
}

NOINLINE void worker(Inventory& inv, int id, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    inv.add("widget", 2, 1.5);
    inv.take("widget", 1);
  }
  inv.add("gadget-" + std::to_string(id), id + 1, 4.25);
}

NOINLINE double checkout(const Inventory& inv, const Bundle& cart,
                         const std::vector<std::unique_ptr<Discount>>& discounts) {
  double amount = bundle_price(inv, cart);
  for (const auto& d : discounts) amount = d->apply(amount);
  return amount;
}

}  // namespace shop

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  shop::Inventory inv;
  inv.add("bolt", 100, 0.25);
  inv.add("nut", 100, 0.1);
  inv.add("bracket", 10, 3.0);

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(shop::worker, std::ref(inv), t, rounds);
  for (auto& t : pool) t.join();

  shop::Bundle shelf{"bracket", 2, {{"bolt", 8, {}}, {"nut", 8, {}}, {"", 1, {{"bolt", 4, {}}}}}};
  std::vector<std::unique_ptr<shop::Discount>> discounts;
  discounts.push_back(std::make_unique<shop::Percent>(10));
  discounts.push_back(std::make_unique<shop::Threshold>(5.0, 1.0));
  std::printf("shelf kit: %.2f\n", shop::checkout(inv, shelf, discounts));

  std::printf("restock plan: %ld\n", shop::restock_plan(30));
  shop::try_fulfil(inv, {{"bolt", 10}, {"nut", 10}});
  shop::try_fulfil(inv, {{"bracket", 2}, {"unobtainium", 1}});
  std::printf("inventory value: %.2f\n", inv.value());
  return 0;
}
