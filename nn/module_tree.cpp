#include "module_tree.hpp"

#include <algorithm>
#include <memory>
#include <ostream>

namespace xgrad::nn {

namespace {

// A module's children as torch's children(): each module once, at its first name.
std::vector<std::shared_ptr<Module>> unique_children(const ModuleTree::Children& kids) {
    std::vector<std::shared_ptr<Module>> out;
    std::unordered_set<const Module*> seen;
    for (const auto& [name, c] : kids)
        if (seen.insert(c.get()).second) out.push_back(c);
    return out;
}

}  // namespace

void ModuleTree::apply(Module& root, const std::function<void(Module&)>& fn) {
    // The children are copied when a module is entered (and kept alive), so that fn may
    // register or remove modules as it goes without pulling the list from under the walk.
    struct Frame {
        Module* m;
        std::vector<std::shared_ptr<Module>> kids;
        std::size_t next;
    };
    std::vector<Frame> stack;
    stack.push_back({&root, unique_children(root.m_children), 0});
    while (!stack.empty()) {
        Frame& f = stack.back();
        if (f.next < f.kids.size()) {
            Module* child = f.kids[f.next++].get();
            stack.push_back({child, unique_children(child->m_children), 0});
            continue;
        }
        Module* done = f.m;
        fn(*done);
        stack.pop_back();
    }
}

bool ModuleTree::contains(const Module& from, const Module& target, std::string& path) {
    path.clear();
    if (&from == &target) return true;
    struct Frame {
        const Module* m;
        std::size_t next;
    };
    struct UpFrame {
        const Module* m;
        std::unordered_map<Module*, std::size_t>::const_iterator next;
    };
    // Down: from's subtree through children. Up: target's ancestors through parents.
    std::vector<Frame> down{{&from, 0}};
    std::vector<UpFrame> up{{&target, target.m_parents.begin()}};
    std::unordered_set<const Module*> seen_down{&from}, seen_up{&target};
    while (!down.empty() && !up.empty()) {
        {
            Frame& f = down.back();
            if (f.next == f.m->m_children.size()) {
                down.pop_back();
            } else {
                const Module* c = f.m->m_children[f.next++].second.get();
                if (c == &target) {
                    // the names down the stack: each frame's last child taken
                    for (const auto& d : down) {
                        if (!path.empty()) path += '.';
                        path += d.m->m_children[d.next - 1].first;
                    }
                    return true;
                }
                if (seen_down.insert(c).second) down.push_back({c, 0});
            }
        }
        {
            UpFrame& f = up.back();
            if (f.next == f.m->m_parents.end()) {
                up.pop_back();
            } else {
                const Module* p = (f.next++)->first;
                if (p == &from) {
                    // up holds target, a parent of it, ...; `from` holds the last. Names top down.
                    const Module* holder = &from;
                    for (auto it = up.rbegin(); it != up.rend(); ++it) {
                        const auto& kids = holder->m_children;
                        const auto at = std::find_if(kids.begin(), kids.end(),
                                                     [&](const auto& kv) { return kv.second.get() == it->m; });
                        if (!path.empty()) path += '.';
                        path += at->first;
                        holder = it->m;
                    }
                    return true;
                }
                if (seen_up.insert(p).second) up.push_back({p, p->m_parents.begin()});
            }
        }
    }
    return false;
}

void ModuleTree::tear_down(Module& m) {
    std::vector<std::shared_ptr<Module>> pending;
    const auto take_children = [&](Module& owner) {
        for (auto& [name, c] : owner.m_children) {
            owner.unlink(*c);
            pending.push_back(std::move(c));
        }
        owner.m_children.clear();
        owner.m_names.clear();
    };
    take_children(m);
    while (!pending.empty()) {
        std::shared_ptr<Module> c = std::move(pending.back());
        pending.pop_back();
        // The last owner: its children are taken here, so its destructor (at the end of this
        // iteration) has none to recurse into. A layer's typed members that hold the same
        // children are gone by then, and the pending entries are the children's last owners.
        if (c.use_count() == 1) take_children(*c);
    }
}

namespace {

// Writes text to os, every line break followed by `indent` spaces (torch's _addindent,
// applied once per level, comes to this).
class IndentedWriter {
public:
    explicit IndentedWriter(std::ostream& os) : m_os(os) {}
    void text(const std::string& s, std::size_t indent) {
        std::size_t start = 0;
        for (std::size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
            m_os.write(s.data() + start, static_cast<std::streamsize>(nl - start));
            newline(indent);
        }
        m_os.write(s.data() + start, static_cast<std::streamsize>(s.size() - start));
    }
    void newline(std::size_t indent) {
        m_os.put('\n');
        while (indent > 0) {
            const std::size_t n = std::min(indent, m_spaces.size());
            m_os.write(m_spaces.data(), static_cast<std::streamsize>(n));
            indent -= n;
        }
    }
    void raw(const char* s) { m_os << s; }

private:
    std::ostream& m_os;
    const std::string m_spaces = std::string(64, ' ');
};

std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    for (std::size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1)
        lines.push_back(s.substr(start, nl - start));
    lines.push_back(s.substr(start));
    return lines;
}

}  // namespace

// torch.nn.Module.__repr__ unrolled: a module at depth d has every line after its first
// indented by 2d spaces, its extra lines and "(name): " lines by 2(d + 1), d capped at
// max_print_indent_levels.
void ModuleTree::print(std::ostream& os, const Module& root) {
    IndentedWriter out(os);
    struct Frame {
        const Module* m;
        std::size_t next;
        std::size_t indent;  // of the module's closing line; its inner lines are one level in
    };
    std::vector<Frame> stack;
    const auto indent_of = [](std::size_t depth) { return 2 * std::min(depth, max_print_indent_levels); };
    // Writes the module's first line and extra lines, and stacks it if it has children.
    const auto open = [&](const Module& m, std::size_t depth) {
        const std::size_t indent = indent_of(depth), inner = indent_of(depth + 1);
        out.text(m.name(), indent);
        out.raw("(");
        const std::string extra = m.extra_repr();
        const std::vector<std::string> extra_lines = extra.empty() ? std::vector<std::string>{} : split_lines(extra);
        if (m.m_children.empty() && extra_lines.size() <= 1) {
            if (!extra_lines.empty()) out.text(extra_lines[0], indent);
            out.raw(")");
            return;
        }
        for (const auto& line : extra_lines) {
            out.newline(inner);
            out.text(line, indent);
        }
        stack.push_back({&m, 0, indent});
    };
    open(root, 0);
    while (!stack.empty()) {
        Frame& f = stack.back();
        const Children& kids = f.m->m_children;
        if (f.next == kids.size()) {
            out.newline(f.indent);
            out.raw(")");
            stack.pop_back();
            continue;
        }
        const auto& [name, child] = kids[f.next++];
        const std::size_t depth = stack.size();  // the child's
        out.newline(indent_of(depth));
        out.raw("(");
        out.text(name, f.indent);
        out.raw("): ");
        open(*child, depth);
    }
}

}  // namespace xgrad::nn
