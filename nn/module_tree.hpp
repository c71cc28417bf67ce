#pragma once
/// The walks of a module tree, for module.cpp: every one keeps its own stack, never recursing,
/// so that a tree as deep as memory allows is walked in constant call-stack depth. Internal to
/// nn (it reads Module's private children and parents).
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nn/module.hpp"

namespace xgrad::nn {

struct ModuleTree {
    using Children = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;
    static const auto& own_parameters(const Module& m) { return m.m_parameters; }
    static const auto& own_buffers(const Module& m) { return m.m_buffers; }

    /// Calls visit(module, path) for every module below and including `root`, in torch's
    /// pre-order (a module, then each child's subtree in registration order), `path` dotted
    /// from root ("" for root itself, "blks.0.attention"). With `once`, a module reachable by
    /// two paths is visited at its first (named_modules, named_parameters); without, at every
    /// path (state_dict, as torch's). `path` is one buffer, extended and cut back as the walk
    /// goes, so a chain costs time linear in its names, not quadratic.
    template <class Visit>
    static void preorder(const Module& root, bool once, Visit&& visit) {
        struct Frame {
            const Module* m;
            std::size_t next;
            std::size_t path_size;  // the path's length before this module's name was added
        };
        std::unordered_set<const Module*> seen;
        std::string path;
        std::vector<Frame> stack{{&root, 0, 0}};
        if (once) seen.insert(&root);
        visit(root, path);
        while (!stack.empty()) {
            Frame& f = stack.back();
            const Children& kids = f.m->m_children;
            if (f.next == kids.size()) {
                path.resize(f.path_size);
                stack.pop_back();
                continue;
            }
            const auto& [name, child] = kids[f.next++];
            if (once && !seen.insert(child.get()).second) continue;
            const std::size_t before = path.size();
            if (!path.empty()) path += '.';
            path += name;
            stack.push_back({child.get(), 0, before});
            visit(*child, path);
        }
    }

    /// torch's apply: fn on each child's subtree (children() of each module, so a child held
    /// twice by one parent is visited once), then on the module itself.
    static void apply(Module& root, const std::function<void(Module&)>& fn);

    /// Whether `target` is `from` or lies below it; if so, `path` is the dotted path from `from`
    /// down to it. Searches down from `from` and up from `target` in turns and stops when either
    /// side is exhausted, so linking a chain from either end costs O(1) a link.
    static bool contains(const Module& from, const Module& target, std::string& path);

    /// Takes every child from `m` (unlinking m from them) and frees those `m` held last, each
    /// one's children taken before it dies, so that no destructor recurses into its children.
    static void tear_down(Module& m);

    /// torch's repr, written as it goes (module.hpp's to_string).
    static void print(std::ostream& os, const Module& root);
};

}  // namespace xgrad::nn
