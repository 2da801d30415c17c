// test_autograd_hooks.cpp — the engine's hooks (autograd.h) that DDP builds on: a leaf's
// post-accumulate-grad hook fires once per backward, with .grad final, as soon as the last node
// feeding it ran; queue_callback runs after every gradient was accumulated; a hook that throws
// stops the backward.
#include <string>

#include "helpers.h"

using namespace mini_test;
using mini::Error;

namespace {
Tensor add(const Tensor& a, const Tensor& b) { return mini::binary(OpKind::Add, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return mini::binary(OpKind::Mul, a, b); }
Tensor sum(const Tensor& a) { return mini::reduce(OpKind::Sum, a, {}, false); }
Tensor tanh(const Tensor& a) { return mini::unary(OpKind::Tanh, a); }
}  // namespace

TEST_CASE("hooks fire in backward order, each right after its leaf's last gradient", "[autograd]") {
  // h1 = tanh(x * w1), h2 = tanh(h1 * w2), h3 = tanh(h2 * w3): backward reaches w3 first
  Tensor x = leaf({0.5, -1}, {2});
  Tensor w1 = leaf({1, 2}, {2}), w2 = leaf({3, 4}, {2}), w3 = leaf({5, 6}, {2});
  std::string events;
  for (auto [w, name] : {std::pair{w1, "1"}, std::pair{w2, "2"}, std::pair{w3, "3"}})
    mini::add_post_accumulate_grad_hook(w, [&events, name = std::string(name)](const Tensor& leaf) {
      REQUIRE(leaf->grad);  // final when the hook runs
      events += "w" + name + " ";
    });
  mini::add_post_accumulate_grad_hook(x, [&](const Tensor&) { events += "x "; });
  Tensor h3 = tanh(mul(tanh(mul(tanh(mul(x, w1)), w2)), w3));
  mini::backward(sum(h3), nullptr, false);
  // w3's gradient is complete after the first two nodes; it does not wait for the rest
  CHECK(events == "w3 w2 w1 x ");
}

TEST_CASE("a leaf used twice fires its hook once, after both gradients were summed", "[autograd]") {
  Tensor w = leaf({2}, {1});
  int calls = 0;
  double seen = 0;
  mini::add_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
    calls++;
    seen = item(leaf->grad);
  });
  mini::backward(sum(add(mul(w, w), w)), nullptr, false);  // d/dw (w^2 + w) = 2w + 1
  CHECK(calls == 1);
  CHECK(seen == 5);
}

TEST_CASE("a queued callback runs once every gradient is accumulated; outside backward it fails", "[autograd]") {
  Tensor a = leaf({1}, {1}), b = leaf({2}, {1});
  std::string events;
  mini::add_post_accumulate_grad_hook(b, [&](const Tensor&) {
    events += "b ";
    mini::queue_callback([&] {
      events += "callback ";
      CHECK(a->grad);  // a's accumulation came before
    });
  });
  mini::add_post_accumulate_grad_hook(a, [&](const Tensor&) { events += "a "; });
  mini::backward(sum(mul(tanh(a), b)), nullptr, false);
  CHECK(events == "b a callback ");
  CHECK_MINI_ERROR(mini::queue_callback([] {}), Error::Kind::Runtime, "during backward pass");
}

TEST_CASE("a removed hook does not fire; a hook that throws stops the backward", "[autograd]") {
  Tensor w = leaf({1}, {1});
  int calls = 0;
  int id = mini::add_post_accumulate_grad_hook(w, [&](const Tensor&) { calls++; });
  mini::remove_post_accumulate_grad_hook(w, id);
  mini::backward(sum(mul(w, w)), nullptr, false);
  CHECK(calls == 0);
  mini::add_post_accumulate_grad_hook(w, [](const Tensor&) { mini::fail("hook says no"); });
  CHECK_MINI_ERROR(mini::backward(sum(mul(w, w)), nullptr, false), Error::Kind::Runtime, "hook says no");
  // the engine's state is clean after it: no callback list is left behind
  CHECK_MINI_ERROR(mini::queue_callback([] {}), Error::Kind::Runtime, "during backward pass");
}

TEST_CASE("hooks are refused on a leaf without grad and on a non-leaf", "[autograd]") {
  Tensor plain = make({1}, {1});
  CHECK_MINI_ERROR(mini::add_post_accumulate_grad_hook(plain, [](const Tensor&) {}), Error::Kind::Runtime,
                   "doesn't require gradient");
  Tensor w = leaf({1}, {1});
  CHECK_MINI_ERROR(mini::add_post_accumulate_grad_hook(mul(w, w), [](const Tensor&) {}), Error::Kind::Runtime,
                   "non-leaf");
}
