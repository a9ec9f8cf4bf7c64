// The interpreter of the statement tree (renderer.h).
#include "chat_template/renderer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <iterator>
#include <map>
#include <string_view>

#include "chat_template/limits.h"

namespace moeflow::jinja {
namespace {

struct LoopBreak {};
struct LoopContinue {};

class Renderer {
 public:
  explicit Renderer(const json& globals) {
    if (deeper_than(globals, kMaxValueDepth))
      terr("the context nests lists/objects deeper than {} levels", kMaxValueDepth);
    uint64_t items = 0, bytes = 0;
    measure(globals, items, bytes);
    max_steps_ = kBaseSteps + kStepsPerItem * items;
    max_bytes_ = kBaseBytes + kBytesPerByte * bytes;
    scopes_.emplace_back();
    for (auto it = globals.begin(); it != globals.end(); ++it) scopes_[0][it.key()] = it.value();
  }

  void exec(const Body& b, std::string& out) {
    for (const NodeP& n : b) exec(*n, out);
  }

 private:
  using Scope = std::map<std::string, json>;

  // The render's work budget (kBaseSteps.., kBaseBytes..): a template that loops or copies without
  // end stops with an Error instead of stalling the server or exhausting memory.
  static void measure(const json& j, uint64_t& items, uint64_t& bytes) {
    bytes += shallow_bytes(j);
    if (!j.is_structured()) return;
    items += j.size();
    for (const json& x : j) measure(x, items, bytes);  // depth checked by the caller
  }
  void step(uint64_t cost = 1) {
    steps_ += cost;
    if (steps_ > max_steps_) terr("rendering took more than {} steps", max_steps_);
  }
  // Charged before an allocation of `n` bytes where one can be large.
  void produce(uint64_t n) {
    bytes_ += n;
    if (n > max_bytes_ || bytes_ > max_bytes_)
      terr("rendering produced more than {} MiB of text and values", max_bytes_ >> 20);
  }
  uint64_t bytes_left() const { return bytes_ >= max_bytes_ ? 0 : max_bytes_ - bytes_; }
  // Heap bytes of a whole value (string bytes + kItemBytes per item), counted up to `cap` (so
  // the walk costs no more than the budget allows).
  uint64_t deep_bytes(const json& j, uint64_t cap) const {
    uint64_t n = shallow_bytes(j);
    if (j.is_structured())
      for (const json& x : j) {
        if (n > cap) break;
        n += deep_bytes(x, cap - n);
      }
    return n;
  }
  void charge_copy(const json& j) { produce(deep_bytes(j, bytes_left() + 1)); }
  void append(std::string& out, std::string_view piece) {
    produce(piece.size());
    out += piece;
  }

  json* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  // Guard of the render's recursion (kMaxRenderDepth): statements and expressions inside each
  // other, which macros calling macros make unbounded.
  struct Deeper {
    explicit Deeper(Renderer& r) : r_(r) {
      if (++r_.depth_ > kMaxRenderDepth)
        terr("rendering nested deeper than {} levels (a macro calling itself without end?)",
             kMaxRenderDepth);
    }
    ~Deeper() { --r_.depth_; }
    Renderer& r_;
  };

  void exec(const TemplateNode& n, std::string& out) {
    step();
    Deeper deeper(*this);
    switch (n.kind) {
      case TemplateNode::Text: append(out, n.text); return;
      case TemplateNode::Output: append(out, to_str(eval(*n.expr))); return;
      case TemplateNode::If:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) {
            exec(body, out);
            return;
          }
        }
        return;
      case TemplateNode::For: exec_for(n, out); return;
      case TemplateNode::Set: {
        Value v = eval(*n.expr);
        if (v.borrowed()) charge_copy(v.j());
        assign(n.targets, std::move(v).take());
        return;
      }
      case TemplateNode::SetBlock: {
        std::string s;
        exec(n.body, s);
        assign(n.targets, s);
        return;
      }
      case TemplateNode::Break: throw LoopBreak{};
      case TemplateNode::Continue: throw LoopContinue{};
      case TemplateNode::Scope: exec(n.body, out); return;
      case TemplateNode::Macro: macros_[n.text] = &n; return;  // defined where it is run
    }
  }

  // A macro call (Jinja's semantics): the arguments are evaluated in the caller's scope, then
  // the body runs in a scope of its own that sees the parameters and the template's top level
  // (globals and top-level {% set %}), not the caller's loop variables or loop-local sets;
  // parameters left out take their default (evaluated in the macro's scope, so it may use the
  // parameters before it) or are undefined. The body's text is the value.
  Value call_macro(const TemplateNode& m, const Expr& e) {
    Scope local;
    std::vector<Value> a = args(e);
    if (a.size() > m.targets.size())
      terr("macro '{}' takes not more than {} argument(s)", m.text, m.targets.size());
    for (size_t k = 0; k < a.size(); ++k) local[m.targets[k]] = std::move(a[k]).take();
    for (const auto& [name, x] : e.kwargs) {
      if (std::find(m.targets.begin(), m.targets.end(), name) == m.targets.end())
        terr("macro '{}' takes no keyword argument '{}'", m.text, name);
      if (local.count(name)) terr("macro '{}' got multiple values for argument '{}'", m.text, name);
      local[name] = eval(*x).take();
    }
    // The caller's scopes are set aside (std::map keeps its nodes when moved, so values borrowed
    // from them by the expression that makes this call stay valid) and put back afterwards.
    struct Hide {
      explicit Hide(std::vector<Scope>& s) : s_(s) {
        hidden_.assign(std::make_move_iterator(s_.begin() + 1), std::make_move_iterator(s_.end()));
        s_.resize(1);
      }
      ~Hide() {
        s_.resize(1);
        for (Scope& sc : hidden_) s_.push_back(std::move(sc));
      }
      std::vector<Scope>& s_;
      std::vector<Scope> hidden_;
    } hide(scopes_);
    scopes_.push_back(std::move(local));
    for (size_t k = 0; k < m.targets.size(); ++k)
      if (!scopes_.back().count(m.targets[k]) && m.defaults[k])
        scopes_.back()[m.targets[k]] = eval(*m.defaults[k]).take();
    std::string out;
    try {
      exec(m.body, out);
    } catch (const LoopBreak&) {  // Jinja refuses these when it compiles the macro
      terr("'break' outside a loop in macro '{}'", m.text);
    } catch (const LoopContinue&) {
      terr("'continue' outside a loop in macro '{}'", m.text);
    }
    return json(std::move(out));
  }

  void assign(const std::vector<std::string>& t, json v) {
    // Values a template builds stay as flat as its context may be (a namespace can hold
    // itself: {% set ns.x = ns %} in a loop would nest without end).
    if (deeper_than(v, kMaxValueDepth))
      terr("'{}' would nest lists/objects deeper than {} levels", t.back(), kMaxValueDepth);
    if (t.size() == 1) {
      scopes_.back()[t[0]] = std::move(v);
      return;
    }
    json* ns = lookup(t[0]);
    if (!ns || !ns->is_object())
      terr("cannot set attribute '{}' of '{}': not a namespace", t[1], t[0]);
    (*ns)[t[1]] = std::move(v);
  }

  void exec_for(const TemplateNode& n, std::string& out) {
    Value seq = eval(*n.expr);
    std::vector<json> items;
    // The items are copied (a string's characters become one item each).
    if (!seq.undef)
      seq.j().is_string() ? produce(kItemBytes * seq.j().get_ref<const std::string&>().size())
                          : charge_copy(seq.j());
    if (seq.undef || seq.j().is_null()) {
    } else if (seq.j().is_array()) {
      items.assign(seq.j().begin(), seq.j().end());
    } else if (seq.j().is_object()) {
      for (auto it = seq.j().begin(); it != seq.j().end(); ++it) items.emplace_back(it.key());
    } else if (seq.j().is_string()) {
      for (char c : seq.j().get<std::string>()) items.emplace_back(std::string(1, c));
    } else {
      terr("cannot iterate over a {}", seq.j().type_name());
    }
    auto bind = [&](Scope& s, const json& item) {
      if (n.targets.size() == 1) {
        s[n.targets[0]] = item;
      } else {
        if (!item.is_array() || item.size() != n.targets.size())
          terr("cannot unpack a loop item into {} variables", n.targets.size());
        for (size_t k = 0; k < n.targets.size(); ++k) s[n.targets[k]] = item[k];
      }
    };
    if (n.cond) {
      std::vector<json> kept;
      for (const json& it : items) {
        step(kLoopStepCost);
        scopes_.emplace_back();
        bind(scopes_.back(), it);
        const bool keep = truthy(eval(*n.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(it);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      exec(n.else_body, out);
      return;
    }
    const int64_t len = (int64_t)items.size();
    for (int64_t i = 0; i < len; ++i) {
      step(kLoopStepCost);  // a scope, the loop variables and the loop object
      scopes_.emplace_back();
      bind(scopes_.back(), items[i]);
      json loop = json::object();
      loop["index"] = i + 1;
      loop["index0"] = i;
      loop["revindex"] = len - i;
      loop["revindex0"] = len - i - 1;
      loop["first"] = i == 0;
      loop["last"] = i + 1 == len;
      loop["length"] = len;
      if (i > 0) loop["previtem"] = items[i - 1];
      if (i + 1 < len) loop["nextitem"] = items[i + 1];
      scopes_.back()["loop"] = std::move(loop);
      bool stop = false;
      try {
        exec(n.body, out);
      } catch (const LoopBreak&) {
        stop = true;
      } catch (const LoopContinue&) {}
      scopes_.pop_back();
      if (stop) break;
    }
  }

  // Every evaluation is a step; a new value (not a borrowed variable) is charged by its size.
  Value eval(const Expr& e) {
    step();
    Deeper deeper(*this);
    Value v = eval_node(e);
    if (!v.undef && !v.borrowed()) charge_copy(v.j());
    return v;
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case Expr::Lit: return e.lit;
      case Expr::Name: {
        const json* v = lookup(e.name);
        return v ? Value::borrow(v) : Value::undefined();
      }
      case Expr::Attr: {
        Value o = eval(*e.a);
        if (!o.undef && o.j().is_object()) {
          auto it = o.j().find(e.name);
          if (it != o.j().end()) return o.part(*it);
        }
        return Value::undefined();
      }
      case Expr::Index: return index(eval(*e.a), eval(*e.b));
      case Expr::Slice: return slice(e);
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: {
        const bool r = test(e);
        return json(e.negate ? !r : r);
      }
      case Expr::Not: return json(!truthy(eval(*e.a)));
      case Expr::Neg: {
        Value v = eval(*e.a);
        if (v.undef || !v.j().is_number()) terr("unary '-' needs a number");
        if (is_int(v.j())) {
          return json(int_negate(v.j().get<int64_t>(), "-"));
        }
        return json(-v.j().get<double>());
      }
      case Expr::And: {
        Value a = eval(*e.a);
        return truthy(a) ? eval(*e.b) : a;
      }
      case Expr::Or: {
        Value a = eval(*e.a);
        return truthy(a) ? a : eval(*e.b);
      }
      case Expr::Cond:
        if (truthy(eval(*e.b))) return eval(*e.a);
        return e.c ? eval(*e.c) : Value::undefined();
      case Expr::List: {
        json arr = json::array();
        for (const auto& x : e.args) arr.push_back(eval(*x).take());
        return arr;
      }
      case Expr::Dict: {
        json obj = json::object();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          obj[to_str(eval(*e.args[k]))] = eval(*e.args[k + 1]).take();
        return obj;
      }
      case Expr::Bin: return binary(e.name, eval(*e.a), eval(*e.b));
    }
    terr("bad expression");
  }

  static Value index(const Value& o, const Value& k) {
    if (o.undef || k.undef) return Value::undefined();
    if (o.j().is_object()) {
      const std::string key = k.j().is_string() ? k.j().get<std::string>() : to_str(k);
      auto it = o.j().find(key);
      if (it != o.j().end()) return o.part(*it);
      return Value::undefined();
    }
    if (o.j().is_array() || o.j().is_string()) {
      if (!k.j().is_number_integer()) terr("index must be an integer");
      const int64_t len = o.j().is_array() ? (int64_t)o.j().size()
                                           : (int64_t)o.j().get_ref<const std::string&>().size();
      int64_t i = k.j().get<int64_t>();
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::undefined();
      if (o.j().is_array()) return o.part(o.j()[(size_t)i]);
      return json(std::string(1, o.j().get_ref<const std::string&>()[(size_t)i]));
    }
    return Value::undefined();
  }

  Value slice(const Expr& e) {
    Value o = eval(*e.a);
    if (o.undef) return o;
    const bool str = o.j().is_string();
    if (!str && !o.j().is_array()) terr("cannot slice a {}", o.j().type_name());
    const int64_t len =
        str ? (int64_t)o.j().get_ref<const std::string&>().size() : (int64_t)o.j().size();
    int64_t step = e.args[0] ? need_int(eval(*e.args[0]), "slice step") : 1;
    if (step == 0) terr("slice step cannot be zero");
    auto norm = [&](const ExprP& x, int64_t dflt) -> int64_t {
      if (!x) return dflt;
      int64_t v = need_int(eval(*x), "slice bound");
      if (v < 0) v += len;
      if (step > 0) return std::clamp<int64_t>(v, 0, len);
      return std::clamp<int64_t>(v, -1, len - 1);
    };
    const int64_t lo = norm(e.b, step > 0 ? 0 : len - 1), hi = norm(e.c, step > 0 ? len : -1);
    json out = str ? json(std::string()) : json::array();
    // lo and hi are in [-1, len]; the count is computed without stepping past them (a step
    // near INT64_MAX would overflow i).
    const uint64_t span =
        step > 0 ? (hi > lo ? uint64_t(hi - lo) : 0) : (lo > hi ? uint64_t(lo - hi) : 0);
    const uint64_t stride = step > 0 ? uint64_t(step) : 0 - uint64_t(step);
    const uint64_t count = span ? (span - 1) / stride + 1 : 0;
    for (uint64_t k = 0; k < count; ++k) {
      const int64_t i = lo + (step > 0 ? int64_t(k * stride) : -int64_t(k * stride));
      if (str)
        out.get_ref<std::string&>() += o.j().get_ref<const std::string&>()[(size_t)i];
      else
        out.push_back(o.j()[(size_t)i]);
    }
    return out;
  }

  // Comparing big borrowed values costs their size: charged like a copy of the smaller one.
  void charge_compare(const Value& a, const Value& b) {
    if (a.undef || b.undef) return;
    const uint64_t cap = bytes_left() + 1;
    produce(std::min(deep_bytes(a.j(), cap), deep_bytes(b.j(), cap)));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") return json(to_str(a) + to_str(b));
    if (op == "==" || op == "!=") {
      charge_compare(a, b);
      return json(values_equal(a, b) == (op == "=="));
    }
    if (op == "in" || op == "not in") {
      if (!b.undef) charge_copy(b.j());  // a linear search through b
      bool r = false;
      if (!b.undef) {
        if (b.j().is_string()) {
          r = a.j().is_string() &&
              find_text(b.j().get_ref<const std::string&>(), a.j().get_ref<const std::string&>()) !=
                  std::string::npos;
        } else if (b.j().is_array()) {
          for (const json& x : b.j()) r = r || (!a.undef && x == a.j());
        } else if (b.j().is_object()) {
          r = a.j().is_string() && b.j().contains(a.j().get<std::string>());
        }
      }
      return json(op == "in" ? r : !r);
    }
    if (a.undef || b.undef) terr("'{}' on an undefined value", op);
    const json &x = a.j(), &y = b.j();
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (!((is_num(x) && is_num(y)) || (x.is_string() && y.is_string())))
        terr("cannot compare {} and {}", x.type_name(), y.type_name());
      if (op == "<") return json(x < y);
      if (op == ">") return json(y < x);
      if (op == "<=") return json(!(y < x));
      return json(!(x < y));
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) return json(x.get<std::string>() + y.get<std::string>());
      if (x.is_array() && y.is_array()) {
        json r = x;
        for (const json& v : y) r.push_back(v);
        return r;
      }
    }
    if (op == "*" && x.is_string() && is_int(y)) {
      const std::string& xs = x.get_ref<const std::string&>();
      const int64_t n = y.get<int64_t>();
      if (xs.empty() || n <= 0) return json(std::string());
      if (uint64_t(n) > max_bytes_ / xs.size())
        produce(max_bytes_ + 1);  // too long, before allocating
      produce(xs.size() * uint64_t(n));
      std::string r;
      r.reserve(xs.size() * size_t(n));
      for (int64_t i = 0; i < n; ++i) r += xs;
      return json(std::move(r));
    }
    if (!is_num(x) || !is_num(y))
      terr("unsupported operand types for '{}': {} and {}", op, x.type_name(), y.type_name());
    const bool ints = is_int(x) && is_int(y);
    if (ints) {
      const int64_t p = x.get<int64_t>(), q = y.get<int64_t>();
      if (op == "+" || op == "-" || op == "*") return json(int_arith(op, p, q));
      if (op == "/") {
        if (q == 0) terr("division by zero");
        return json((double)p / (double)q);
      }
      if (op == "//" || op == "%") {
        if (q == 0) terr("division by zero");
        if (p == INT64_MIN && q == -1) {
          if (op == "%") return json(int64_t{0});
          terr("integer overflow in '{}'", op);
        }
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) {  // Python floors
          d -= 1;
          m += q;
        }
        return json(op == "//" ? d : m);
      }
      if (op == "**") {
        const double r = std::round(std::pow((double)p, (double)q));
        if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0))
          terr("integer overflow in '**'");
        return json(static_cast<int64_t>(r));
      }
    }
    const double p = x.get<double>(), q = y.get<double>();
    if (op == "+") return json(p + q);
    if (op == "-") return json(p - q);
    if (op == "*") return json(p * q);
    if (op == "/") return json(p / q);
    if (op == "//") return json(std::floor(p / q));
    if (op == "%") return json(p - q * std::floor(p / q));
    if (op == "**") return json(std::pow(p, q));
    terr("unknown operator '{}'", op);
  }

  std::vector<Value> args(const Expr& e) {
    std::vector<Value> v;
    for (const auto& a : e.args) v.push_back(eval(*a));
    return v;
  }
  Value kwarg(const Expr& e, const char* name) {
    for (const auto& [k, x] : e.kwargs)
      if (k == name) return eval(*x);
    return Value::undefined();
  }

  Value call(const Expr& e) {
    if (e.a->kind == Expr::Name) {
      const std::string& f = e.a->name;
      // A macro the template defined (before the functions below, as Jinja's names shadow
      // its globals).
      if (auto m = macros_.find(f); m != macros_.end()) return call_macro(*m->second, e);
      std::vector<Value> a = args(e);
      if (f == "raise_exception")
        terr("{}", a.empty() ? std::string("raise_exception") : to_str(a[0]));
      if (f == "namespace" || f == "dict") {
        json obj = json::object();
        for (const auto& [k, x] : e.kwargs) obj[k] = eval(*x).take();
        return obj;
      }
      if (f == "range") {
        int64_t lo = 0, hi = 0, step = 1;
        if (a.size() == 1)
          hi = need_int(a[0], "range");
        else if (a.size() >= 2) {
          lo = need_int(a[0], "range");
          hi = need_int(a[1], "range");
          if (a.size() >= 3) step = need_int(a[2], "range");
        }
        if (step == 0) terr("range step cannot be zero");
        // Counted in unsigned arithmetic: hi - lo or i + step may not fit in int64.
        const uint64_t span = step > 0 ? (hi > lo ? uint64_t(hi) - uint64_t(lo) : 0)
                                       : (lo > hi ? uint64_t(lo) - uint64_t(hi) : 0);
        const uint64_t stride = step > 0 ? uint64_t(step) : 0 - uint64_t(step);
        const uint64_t count = span ? (span - 1) / stride + 1 : 0;
        if (count > uint64_t(kMaxRange)) terr("range() of {} items (at most {})", count, kMaxRange);
        json r = json::array();
        for (uint64_t k = 0; k < count; ++k)
          r.push_back(int64_t(uint64_t(lo) + k * uint64_t(step)));
        return r;
      }
      if (f == "strftime_now") {
        const std::time_t t = std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[256];
        const size_t n = std::strftime(
            buf, sizeof buf, a.empty() ? "%Y-%m-%d" : need_str(a[0], "strftime_now").c_str(), &tm);
        return json(std::string(buf, n));
      }
      terr("unknown function '{}'", f);
    }
    if (e.a->kind == Expr::Attr) return method(eval(*e.a->a), e.a->name, args(e), e);
    terr("only functions and methods can be called");
  }

  Value method(const Value& o, const std::string& m, const std::vector<Value>& a, const Expr& e) {
    if (o.undef) terr("cannot call '{}' on an undefined value", m);
    if (o.j().is_string()) {
      const std::string& s = o.j().get_ref<const std::string&>();
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const std::string chars =
            a.empty() || a[0].j().is_null() ? kWhitespace : need_str(a[0], m.c_str());
        return json(strip_chars(s, chars, m != "rstrip", m != "lstrip"));
      }
      if (m == "startswith") return json(s.rfind(need_str(arg(a, 0, m), "startswith"), 0) == 0);
      if (m == "endswith") {
        const std::string& x = need_str(arg(a, 0, m), "endswith");
        return json(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r)
          c = m == "upper" ? (char)std::toupper((unsigned char)c)
                           : (char)std::tolower((unsigned char)c);
        return json(r);
      }
      if (m == "title" || m == "capitalize") return filter_named(m, o, {}, e);
      if (m == "replace") return filter_named("replace", o, a, e);
      if (m == "split") {
        json r = json::array();
        if (a.empty() || a[0].j().is_null()) {
          size_t i = 0;
          while (true) {
            i = s.find_first_not_of(kWhitespace, i);
            if (i == std::string::npos) break;
            size_t j = s.find_first_of(kWhitespace, i);
            produce(kItemBytes);  // before the item exists: "a a a ..." makes many
            r.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
            if (j == std::string::npos) break;
            i = j;
          }
          return r;
        }
        const std::string& sep = need_str(a[0], "split");
        if (sep.empty()) terr("split: empty separator");
        int64_t maxsplit = a.size() > 1 ? need_int(a[1], "split") : -1;
        size_t i = 0;
        for (;;) {
          size_t j = find_text(s, sep, i);
          produce(kItemBytes);  // before the item exists: "xxxx".split("x") makes many
          if (j == std::string::npos || maxsplit == 0) {
            r.push_back(s.substr(i));
            break;
          }
          r.push_back(s.substr(i, j - i));
          i = j + sep.size();
          if (maxsplit > 0) --maxsplit;
        }
        return r;
      }
      if (m == "join") {
        std::string r;
        if (a.empty() || !a[0].j().is_array()) terr("join needs a list");
        bool first = true;
        for (const json& x : a[0].j()) {
          if (!first) append(r, s);
          append(r, to_str(Value::borrow(&x)));
          first = false;
        }
        return json(r);
      }
      if (m == "format") {
        std::string r;
        size_t k = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '}') {
            r += k < a.size() ? to_str(a[k++]) : "";
            ++i;
          } else {
            r += s[i];
          }
        }
        return json(r);
      }
    }
    if (o.j().is_object()) {
      if (m == "items") {
        json r = json::array();
        for (auto it = o.j().begin(); it != o.j().end(); ++it)
          r.push_back(json::array({it.key(), it.value()}));
        return r;
      }
      if (m == "keys" || m == "values") {
        json r = json::array();
        for (auto it = o.j().begin(); it != o.j().end(); ++it)
          r.push_back(m == "keys" ? json(it.key()) : it.value());
        return r;
      }
      if (m == "get") {
        const std::string& k = need_str(arg(a, 0, m), "get");
        auto it = o.j().find(k);
        if (it != o.j().end()) return o.part(*it);
        return a.size() > 1 ? a[1] : Value(json(nullptr));
      }
    }
    // jinja2's words (Python's type names), so a template that calls a mapping's method on a
    // string (MiniMax-M2's `arguments.items()` given OpenAI's JSON-text arguments) is refused
    // with the same message by both.
    const json& oj = o.j();
    const char* py_type = oj.is_string()           ? "str"
                          : oj.is_array()          ? "list"
                          : oj.is_object()         ? "dict"
                          : oj.is_boolean()        ? "bool"
                          : oj.is_number_integer() ? "int"
                          : oj.is_number()         ? "float"
                                                   : "NoneType";
    terr("'{} object' has no attribute '{}'", py_type, m);
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.a);
    return filter_named(e.name, v, args(e), e);
  }

  bool apply_test(const std::string& t, const Value& v, const std::vector<Value>& a) {
    const json& j = v.j();
    if (t == "defined") return !v.undef;
    if (t == "undefined") return v.undef;
    if (t == "none") return !v.undef && j.is_null();
    if (t == "string") return !v.undef && j.is_string();
    if (t == "number") return !v.undef && j.is_number();
    if (t == "integer") return !v.undef && j.is_number_integer();
    if (t == "float") return !v.undef && j.is_number_float();
    if (t == "boolean") return !v.undef && j.is_boolean();
    if (t == "true") return !v.undef && j.is_boolean() && j.get<bool>();
    if (t == "false") return !v.undef && j.is_boolean() && !j.get<bool>();
    if (t == "mapping") return !v.undef && j.is_object();
    // Jinja's undefined is both (it has a length, 0, and iterates over nothing): Hermes'
    // tool-use template reaches `json_spec.type is iterable` with an undefined type.
    if (t == "sequence" || t == "iterable")
      return v.undef || j.is_array() || j.is_string() || j.is_object();
    if (t == "odd" || t == "even") {
      const int64_t x = need_int(v, "odd/even");
      return (x % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const int64_t d = need_int(arg(a, 0, t), "divisibleby");
      const int64_t x = need_int(v, "divisibleby");
      return d != 0 && (d == -1 || x % d == 0);  // INT64_MIN % -1 overflows
    }
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas" || t == "ne" || t == "!=")
      return truthy(binary(t == "ne" || t == "!=" ? "!=" : "==", v, arg(a, 0, t)));
    if (t == "lt" || t == "gt" || t == "le" || t == "ge") {
      static const std::map<std::string, std::string> ops = {
          {"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="}};
      return truthy(binary(ops.at(t), v, arg(a, 0, t)));
    }
    if (t == "in") return truthy(binary("in", v, arg(a, 0, t)));
    terr("unknown test '{}'", t);
  }

  bool test(const Expr& e) { return apply_test(e.name, eval(*e.a), args(e)); }

  Value filter_named(const std::string& f, const Value& v, const std::vector<Value>& a,
                     const Expr& e) {
    const json& j = v.j();
    if (f == "trim")
      return json(strip_chars(v.undef ? "" : need_str(v, "trim"),
                              a.empty() ? kWhitespace : need_str(a[0], "trim"), true, true));
    if (f == "length" || f == "count") {
      if (v.undef) return json(0);
      if (j.is_string()) return json((int64_t)j.get_ref<const std::string&>().size());
      if (j.is_array() || j.is_object()) return json((int64_t)j.size());
      terr("length of a {}", j.type_name());
    }
    if (f == "tojson") {
      Value ind = a.empty() ? kwarg(e, "indent") : a[0];
      int64_t indent = ind.undef || ind.j().is_null() ? -1 : need_int(ind, "tojson indent");
      if (indent > 1024) terr("tojson indent {} is too large", indent);
      std::string out;
      dumps(v.undef ? json(nullptr) : j, static_cast<int>(std::max<int64_t>(indent, -1)), 0, out,
            bytes_left());
      return json(std::move(out));
    }
    if (f == "string") return json(to_str(v));
    if (f == "safe" || f == "e" || f == "escape" || f == "forceescape") return v;
    if (f == "upper" || f == "lower") {
      std::string r = to_str(v);
      for (char& c : r)
        c = f == "upper" ? (char)std::toupper((unsigned char)c)
                         : (char)std::tolower((unsigned char)c);
      return json(r);
    }
    if (f == "capitalize" || f == "title") {
      std::string r = to_str(v);
      bool start = true;
      for (size_t i = 0; i < r.size(); ++i) {
        const unsigned char c = (unsigned char)r[i];
        if (f == "capitalize")
          r[i] = i == 0 ? (char)std::toupper(c) : (char)std::tolower(c);
        else {
          r[i] = start ? (char)std::toupper(c) : (char)std::tolower(c);
          start = !std::isalnum(c);
        }
      }
      return json(r);
    }
    if (f == "replace") {
      std::string s = to_str(v);
      const std::string from = to_str(arg(a, 0, f)), to = to_str(arg(a, 1, f));
      if (from.empty()) return json(s);
      std::string r;
      size_t i = 0;
      for (;;) {
        size_t k = find_text(s, from, i);
        if (k == std::string::npos) break;
        append(r, std::string_view(s).substr(i, k - i));
        append(r, to);
        i = k + from.size();
      }
      append(r, std::string_view(s).substr(i));
      return json(std::move(r));
    }
    if (f == "default" || f == "d") {
      const bool boolean = (a.size() > 1 && truthy(a[1])) || truthy(kwarg(e, "boolean"));
      if (v.undef || (boolean && !truthy(v))) return a.empty() ? Value(json("")) : a[0];
      return v;
    }
    if (f == "first" || f == "last") {
      if (v.undef) return v;
      if (j.is_array()) {
        if (j.empty()) return Value::undefined();
        return f == "first" ? j.front() : j.back();
      }
      if (j.is_string()) {
        const std::string& s = j.get_ref<const std::string&>();
        if (s.empty()) return Value::undefined();
        return json(std::string(1, f == "first" ? s.front() : s.back()));
      }
      terr("{} of a {}", f, j.type_name());
    }
    if (f == "list") {
      if (v.undef) return json::array();
      if (j.is_array()) return v;
      json r = json::array();
      if (j.is_string()) {
        produce(kItemBytes * j.get_ref<const std::string&>().size());  // one item per character
        for (char c : j.get<std::string>()) r.push_back(std::string(1, c));
      } else if (j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it) r.push_back(it.key());
      else
        terr("list of a {}", j.type_name());
      return r;
    }
    if (f == "reverse") {
      if (j.is_string()) {
        std::string s = j.get<std::string>();
        std::reverse(s.begin(), s.end());
        return json(s);
      }
      if (!j.is_array()) terr("reverse of a {}", j.type_name());
      json r = json::array();
      for (auto it = j.rbegin(); it != j.rend(); ++it) r.push_back(*it);
      return r;
    }
    if (f == "join") {
      if (v.undef) return json("");
      if (!j.is_array()) terr("join of a {}", j.type_name());
      const std::string sep = a.empty() ? "" : to_str(a[0]);
      Value attr = kwarg(e, "attribute");
      std::string r;
      bool first = true;
      for (const json& x : j) {
        if (!first) append(r, sep);
        first = false;
        append(r, attr.undef ? to_str(Value::borrow(&x)) : to_str(index(Value::borrow(&x), attr)));
      }
      return json(std::move(r));
    }
    if (f == "items") {
      if (!j.is_object())  // jinja2's TypeError, in its words
        terr("items: can only get item pairs from a mapping, not a {}", j.type_name());
      json r = json::array();
      for (auto it = j.begin(); it != j.end(); ++it)
        r.push_back(json::array({it.key(), it.value()}));
      return r;
    }
    // dictsort(case_sensitive=False, by='key', reverse=False): the (key, value) pairs of a
    // mapping in key order (Gemma 4's templates write tool parameters and arguments this way).
    // Keys compare ASCII-case-folded unless case_sensitive; sorting by value is not supported.
    if (f == "dictsort") {
      if (!j.is_object()) terr("dictsort of a {}", j.type_name());
      const Value cs = a.size() > 0 ? a[0] : kwarg(e, "case_sensitive");
      const Value by = a.size() > 1 ? a[1] : kwarg(e, "by");
      const Value rev = a.size() > 2 ? a[2] : kwarg(e, "reverse");
      if (!by.undef && to_str(by) != "key") terr("dictsort by '{}' is not supported", to_str(by));
      const bool case_sensitive = !cs.undef && truthy(cs), reverse = !rev.undef && truthy(rev);
      struct Item {
        std::string folded;
        json::const_iterator it;
      };
      std::vector<Item> items;
      for (auto it = j.begin(); it != j.end(); ++it) {
        std::string k = it.key();
        if (!case_sensitive)
          for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        items.push_back({std::move(k), it});
      }
      // Stable: keys equal once folded keep the mapping's order, as Python's sorted() does.
      std::stable_sort(items.begin(), items.end(), [&](const Item& x, const Item& y) {
        return reverse ? y.folded < x.folded : x.folded < y.folded;
      });
      json r = json::array();
      for (const Item& item : items) r.push_back(json::array({item.it.key(), item.it.value()}));
      return r;
    }
    if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
      if (v.undef) return json::array();
      if (!j.is_array()) terr("{} of a {}", f, j.type_name());
      const bool attr = f == "selectattr" || f == "rejectattr";
      const bool keep_if = f == "selectattr" || f == "select";
      size_t k = 0;
      Value name;
      if (attr) name = arg(a, k++, f);
      std::string test_name = k < a.size() ? to_str(a[k++]) : "";
      std::vector<Value> targs(a.begin() + (long)std::min(k, a.size()), a.end());
      json r = json::array();
      for (const json& x : j) {
        Value item = attr ? index(Value::borrow(&x), name) : Value::borrow(&x);
        const bool ok = test_name.empty() ? truthy(item) : apply_test(test_name, item, targs);
        if (ok == keep_if) r.push_back(x);
      }
      return r;
    }
    if (f == "map") {
      if (v.undef) return json::array();
      if (!j.is_array()) terr("map of a {}", j.type_name());
      Value attr = kwarg(e, "attribute");
      json r = json::array();
      for (const json& x : j) {
        if (!attr.undef) {
          Value item = index(Value::borrow(&x), attr);
          r.push_back(item.undef ? (a.empty() ? json(nullptr) : kwarg(e, "default").j())
                                 : item.j());
        } else {
          if (a.empty()) terr("map needs a filter name or attribute=");
          r.push_back(filter_named(to_str(a[0]), Value::borrow(&x),
                                   std::vector<Value>(a.begin() + 1, a.end()), e)
                          .take());
        }
      }
      return r;
    }
    if (f == "int") {
      if (j.is_number()) return json(need_int(v, "int"));
      if (j.is_string()) {
        try {
          return json((int64_t)std::stoll(j.get<std::string>()));
        } catch (...) {
          return json(0);
        }
      }
      return json(0);
    }
    if (f == "float") {
      if (j.is_number()) return json(j.get<double>());
      return json(0.0);
    }
    if (f == "abs") {
      if (is_int(j)) {
        const int64_t x = j.get<int64_t>();
        return json(x < 0 ? int_negate(x, "abs") : x);
      }
      if (j.is_number()) return json(std::fabs(j.get<double>()));
      terr("abs of a {}", j.type_name());
    }
    if (f == "indent") {
      const int64_t w = a.empty() ? 4 : need_int(a[0], "indent");
      const bool first = (a.size() > 1 && truthy(a[1])) || truthy(kwarg(e, "first"));
      if (w > 1024) terr("indent width {} is too large", w);
      const std::string pad((size_t)std::max<int64_t>(0, w), ' ');
      std::string s = to_str(v), r;
      if (first) append(r, pad);
      for (size_t i = 0; i < s.size(); ++i) {
        r += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') append(r, pad);
      }
      return json(std::move(r));
    }
    terr("unknown filter '{}'", f);
  }

  std::vector<Scope> scopes_;
  std::map<std::string, const TemplateNode*> macros_;  // the macros defined so far, by name
  int depth_ = 0;                                      // Deeper's count
  uint64_t steps_ = 0, bytes_ = 0, max_steps_ = kBaseSteps, max_bytes_ = kBaseBytes;
};

}  // namespace

std::string render(const Body& body, const json& context) {
  Renderer r(context);
  std::string out;
  try {
    r.exec(body, out);
  } catch (const LoopBreak&) {
    fail("chat template: 'break' outside a loop");
  } catch (const LoopContinue&) {
    fail("chat template: 'continue' outside a loop");
  } catch (const nlohmann::json::exception& e) {
    fail("chat template: {}", e.what());
  }
  return out;
}

}  // namespace moeflow::jinja
