// Anomaly detection: off by default; when on, the first NaN or Inf names the op that made it.
#include <cmath>
#include <thread>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("anomaly detection is off by default and NaN or Inf pass through", "[anomaly]") {
    CHECK_FALSE(detect_anomaly_enabled());
    Tensor y = log(tensor({1.0, 0.0}, kFloat64));
    CHECK(std::isinf(vals(y)[1]));
    Tensor z = sqrt(tensor({-1.0}, kFloat64));
    CHECK(std::isnan(vals(z)[0]));
}

TEST_CASE("anomaly detection names the op whose forward made a NaN or Inf", "[anomaly]") {
    DetectAnomalyGuard guard;
    CHECK(detect_anomaly_enabled());
    Tensor x = tensor({{1.0, 2.0, 0.0}, {4.0, 5.0, 6.0}}, kFloat64);
    CHECK_THROWS_AS(log(x), Error);
    CHECK_THROWS_WITH(log(x), Catch::Contains("log:") && Catch::Contains("-inf") &&
                                  Catch::Contains("(2, 3)") && Catch::Contains("index 2"));
    CHECK_THROWS_WITH(sqrt(tensor({4.0, -1.0})), Catch::Contains("sqrt:") && Catch::Contains("nan"));
    // The first bad op in a chain is the one named, not the ones after it.
    CHECK_THROWS_WITH(exp(div(tensor({1.0}), tensor({0.0}))), Catch::StartsWith("div:"));
    // Finite results go through untouched, with or without a graph.
    Tensor p = param({2, 3}, 0.5, 1.5);
    Tensor ok = log(p).sum();
    ok.backward();
    CHECK(p.grad().defined());
}

TEST_CASE("anomaly detection names the op whose backward made a NaN or Inf", "[anomaly]") {
    // sqrt(0) is finite, its derivative 1 / (2 sqrt(0)) is not.
    Tensor x = tensor({4.0, 0.0}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = (sqrt(x) * 3.0).sum();
    {
        DetectAnomalyGuard guard;
        CHECK_THROWS_WITH(y.backward(Tensor(), true),
                          Catch::Contains("sqrt backward") && Catch::Contains("inf") &&
                              Catch::Contains("(2,)"));
    }
    CHECK_FALSE(detect_anomaly_enabled());
    CHECK_FALSE(x.grad().defined());
    // The failed sweep left no half-delivered gradient behind: a second one is exact.
    y.backward();
    CHECK(vals(x.grad())[0] == Approx(0.75));
    CHECK(std::isinf(vals(x.grad())[1]));
}

TEST_CASE("a backward that failed part way without retain_graph says so when run again", "[anomaly]") {
    Tensor x = tensor({4.0, 0.0}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = (sqrt(x) * 3.0).sum();  // sum and mul run their backward, sqrt's fails
    {
        DetectAnomalyGuard guard;
        CHECK_THROWS_WITH(y.backward(), Catch::Contains("sqrt backward"));
    }
    CHECK_FALSE(x.grad().defined());
    CHECK_THROWS_WITH(y.backward(), Catch::Contains("the graph behind this 'sum' result was freed by an earlier "
                                                    "backward() that failed part way through; run the forward "
                                                    "pass again"));
    // A graph freed by a backward that finished still says so.
    Tensor z = (x * 2.0).sum();
    z.backward();
    CHECK_THROWS_WITH(z.backward(), Catch::Contains("already freed by an earlier backward(); pass retain_graph"));
}

TEST_CASE("anomaly guards nest, restore the previous mode and stay on their thread", "[anomaly]") {
    set_detect_anomaly(true);
    {
        DetectAnomalyGuard off(false);
        CHECK_FALSE(detect_anomaly_enabled());
        CHECK_NOTHROW(log(tensor({0.0})));
    }
    CHECK(detect_anomaly_enabled());
    bool other_thread_on = true;
    std::thread([&] { other_thread_on = detect_anomaly_enabled(); }).join();
    CHECK_FALSE(other_thread_on);
    set_detect_anomaly(false);
    CHECK_NOTHROW(log(tensor({0.0})));
}
