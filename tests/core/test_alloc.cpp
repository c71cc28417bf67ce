// The caching allocator behind every tensor: freed large blocks come back for the next
// request of their size class, small ones go straight to malloc, and the cache never holds
// more than its limit. Each test sets the limit it needs and restores the default after.
#include <cstdint>

#include "core/runtime/alloc.hpp"
#include "helpers.hpp"

using namespace xgrad;

namespace {

// Sets a cache limit for one test and puts the previous one back.
struct LimitGuard {
    std::size_t saved;
    explicit LimitGuard(std::size_t bytes) : saved(alloc_cache_stats().limit_bytes) {
        empty_cache();
        set_alloc_cache_limit(bytes);
    }
    ~LimitGuard() { set_alloc_cache_limit(saved); }
};

constexpr std::size_t MiB = std::size_t(1) << 20;

}  // namespace

TEST_CASE("a freed large block is reused by the next request of its size class", "[alloc]") {
    LimitGuard guard(64 * MiB);
    void* a = cached_alloc(MiB);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
    cached_free(a, MiB);
    CHECK(alloc_cache_stats().cached_bytes == MiB);
    const auto before = alloc_cache_stats();
    void* b = cached_alloc(MiB - 1000);  // same class: 1 MiB
    CHECK(b == a);
    CHECK(alloc_cache_stats().hits == before.hits + 1);
    CHECK(alloc_cache_stats().cached_bytes == 0);
    void* c = cached_alloc(MiB + 1);  // the next class up (1.25 MiB) is a fresh block
    CHECK(c != a);
    CHECK(alloc_cache_stats().misses == before.misses + 1);
    cached_free(b, MiB - 1000);
    cached_free(c, MiB + 1);
    CHECK(alloc_cache_stats().cached_bytes == MiB + MiB / 4 + MiB);
}

TEST_CASE("a CachedBuffer gives its block back to the cache when it dies", "[alloc]") {
    LimitGuard guard(64 * MiB);
    const float* first = nullptr;
    {
        CachedBuffer<float> scratch(MiB / sizeof(float));
        CHECK(scratch.size() == MiB / sizeof(float));
        CHECK(reinterpret_cast<std::uintptr_t>(scratch.data()) % 64 == 0);
        scratch.data()[scratch.size() - 1] = 1.0f;  // the whole block is writable
        first = scratch.data();
        CHECK(alloc_cache_stats().cached_bytes == 0);
    }
    CHECK(alloc_cache_stats().cached_bytes == MiB);
    const auto before = alloc_cache_stats();
    CachedBuffer<float> again(MiB / sizeof(float));  // the next block or step of the same size
    CHECK(again.data() == first);
    CHECK(alloc_cache_stats().hits == before.hits + 1);
    CachedBuffer<std::uint16_t> empty(0);  // a size of 0 still has a valid pointer
    CHECK(empty.data() != nullptr);
    CHECK(empty.size() == 0);
}

TEST_CASE("small blocks bypass the cache", "[alloc]") {
    LimitGuard guard(64 * MiB);
    const auto before = alloc_cache_stats();
    void* p = cached_alloc(1000);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
    cached_free(p, 1000);
    void* z = cached_alloc(0);
    CHECK(z != nullptr);
    cached_free(z, 0);
    CHECK(alloc_cache_stats().cached_bytes == 0);
    CHECK(alloc_cache_stats().hits == before.hits);
    CHECK(alloc_cache_stats().misses == before.misses);
}

TEST_CASE("the cache releases the least recently freed blocks beyond its limit", "[alloc]") {
    LimitGuard guard(3 * MiB);
    void* a = cached_alloc(MiB);
    void* b = cached_alloc(2 * MiB);
    void* c = cached_alloc(MiB);
    cached_free(a, MiB);
    cached_free(b, 2 * MiB);
    CHECK(alloc_cache_stats().cached_bytes == 3 * MiB);
    cached_free(c, MiB);  // 4 MiB would exceed the limit: `a`, the oldest, goes
    CHECK(alloc_cache_stats().cached_bytes == 3 * MiB);
    CHECK(cached_alloc(MiB) == c);  // the 1 MiB block left is c, not a
    void* d = cached_alloc(2 * MiB);
    CHECK(d == b);
    cached_free(c, MiB);
    cached_free(d, 2 * MiB);

    set_alloc_cache_limit(MiB);  // lowering the limit releases at once
    CHECK(alloc_cache_stats().cached_bytes <= MiB);
    empty_cache();
    CHECK(alloc_cache_stats().cached_bytes == 0);
}

TEST_CASE("with a limit of 0 nothing is cached", "[alloc]") {
    LimitGuard guard(0);
    void* a = cached_alloc(4 * MiB);
    cached_free(a, 4 * MiB);
    CHECK(alloc_cache_stats().cached_bytes == 0);
}

TEST_CASE("a training-like loop reuses its buffers: once warm, a step allocates nothing new", "[alloc]") {
    LimitGuard guard(256 * MiB);
    const Tensor w = xgrad::test::param({256, 256});
    auto step = [&] {
        const Tensor x = ones({512, 256}, kFloat64);
        const Tensor loss = tanh(matmul(x, w)).sum();
        loss.backward();
    };
    step();
    step();  // the first accumulation into w.grad allocates once more
    const auto before = alloc_cache_stats();
    step();
    const auto after = alloc_cache_stats();
    CHECK(after.misses == before.misses);
    CHECK(after.hits > before.hits);
}

TEST_CASE("an allocation too large to count throws xgrad::Error naming its size, not a short block", "[alloc]") {
    using Catch::Matchers::Contains;
    cache_allocator<double> alloc;
    CHECK_THROWS_WITH(alloc.allocate(SIZE_MAX / 4), Contains("out of memory") && Contains("elements of 8 bytes"));
    // Counts that fit in size_t bytes but not in any memory: an error, not a wrapped size class
    cache_allocator<float> floats;
    CHECK_THROWS_AS(floats.allocate(SIZE_MAX / 4), Error);
    CHECK_THROWS_WITH(cached_alloc(SIZE_MAX - 100), Contains("allocator: out of memory") &&
                                                        Contains(std::to_string(SIZE_MAX - 100) + " bytes"));
    CHECK_THROWS_WITH(zeros({std::size_t(1) << 61}), Contains("zeros") && Contains("more elements than fit in memory"));
}
