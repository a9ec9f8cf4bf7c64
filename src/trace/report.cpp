#include "trace/report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace moeflow::trace {

nlohmann::json result_json(const SimResult& r, bool per_layer) {
  nlohmann::json j = {{"policy", r.policy},
                      {"predictor", r.predictor},
                      {"cache_rate", r.cache_rate},
                      {"capacity", r.capacity},
                      {"uses", r.uses},
                      {"hits", r.hits},
                      {"late_prefetch_hits", r.late},
                      {"hit_rate", r.hit_rate},
                      {"bytes_moved", r.bytes_moved},
                      {"demand_loads", r.demand_loads},
                      {"placement_loads", r.placement_loads},
                      {"prefetches", r.prefetches},
                      {"prefetch_used", r.prefetch_used},
                      {"prefetch_accuracy", r.prefetch_accuracy},
                      {"fetch_in_time_rate", r.in_time_rate},
                      {"goodpred", r.goodpred},
                      {"prediction_precision", r.pred_precision},
                      {"prediction_recall", r.pred_recall},
                      {"stall_ms", r.stall_ms},
                      {"tpot_ms", r.tpot_ms},
                      {"ttft_ms", r.ttft_ms},
                      {"decode_tokens", r.decode_tokens}};
  if (per_layer) {
    auto& a = j["layers"] = nlohmann::json::array();
    for (auto& l : r.layers) {
      if (!l.uses) continue;
      a.push_back({{"layer", l.layer},
                   {"uses", l.uses},
                   {"hit_rate", (double)l.hits / (double)l.uses},
                   {"late", l.late},
                   {"prediction_recall", (double)l.correct / (double)l.uses},
                   {"stall_ms", l.stall_ms}});
    }
  }
  return j;
}

std::string results_csv(const std::vector<SimResult>& rs) {
  std::string s =
      "policy,predictor,cache_rate,hit_rate,bytes_moved,prefetch_accuracy,fetch_in_time_rate,"
      "goodpred,prediction_recall,"
      "stall_ms,tpot_ms\n";
  for (auto& r : rs)
    s += fmt::format("{},{},{:.4f},{:.6f},{:.0f},{:.6f},{:.6f},{:.6f},{:.6f},{:.3f},{:.4f}\n",
                     r.policy, r.predictor, r.cache_rate, r.hit_rate, r.bytes_moved,
                     r.prefetch_accuracy, r.in_time_rate, r.goodpred, r.pred_recall, r.stall_ms,
                     r.tpot_ms);
  return s;
}

std::string results_svg(const std::vector<SimResult>& rs, const std::string& title) {
  std::map<std::string, std::vector<const SimResult*>> series;
  double xmin = 1, xmax = 0, tmax = 0;
  for (auto& r : rs) {
    series[r.predictor == "none" ? r.policy : r.policy + "+" + r.predictor].push_back(&r);
    xmin = std::min(xmin, r.cache_rate), xmax = std::max(xmax, r.cache_rate),
    tmax = std::max(tmax, r.tpot_ms);
  }
  if (xmax <= xmin) xmax = xmin + 0.01;
  if (tmax <= 0) tmax = 1;
  const double W = 440, H = 300, ml = 60, mt = 40, gap = 80;
  const double total_w = ml + 2 * W + gap + 220;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text "
      "x=\"{:.0f}\" y=\"20\" "
      "font-size=\"14\">{}</text>\n",
      total_w, H + mt + 60, ml, title);
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aa0055"};
  for (int panel = 0; panel < 2; ++panel) {
    double ox = ml + panel * (W + gap), ymax = panel == 0 ? 1.0 : tmax * 1.05;
    s += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" "
        "stroke=\"black\"/>\n",
        ox, mt, W, H);
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", ox, mt - 6,
                     panel == 0 ? "hit rate" : "modelled TPOT (ms)");
    for (int i = 0; i <= 4; ++i) {
      double yv = ymax * i / 4, y = mt + H - H * i / 4;
      s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{:.3g}</text>\n",
                       ox - 4, y + 4, yv);
      double xv = xmin + (xmax - xmin) * i / 4, x = ox + W * i / 4;
      s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{:.1f}%</text>\n", x,
                       mt + H + 14, xv * 100);
    }
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">cache rate</text>\n",
                     ox + W / 2, mt + H + 30);
    int ci = 0;
    for (auto& [name, pts] : series) {
      auto sorted = pts;
      std::sort(sorted.begin(), sorted.end(),
                [](auto* a, auto* b) { return a->cache_rate < b->cache_rate; });
      std::string poly;
      for (auto* r : sorted) {
        double v = panel == 0 ? r->hit_rate : r->tpot_ms;
        poly += fmt::format("{:.1f},{:.1f} ", ox + W * (r->cache_rate - xmin) / (xmax - xmin),
                            mt + H - H * v / ymax);
      }
      const char* col = colors[ci % 12];
      s += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>\n", col,
          name == "belady" ? " stroke-dasharray=\"5,3\"" : "", poly);
      if (panel == 1)
        s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" fill=\"{}\">{}</text>\n", ox + W + 10,
                         mt + 12 + 13 * ci, col, name);
      ++ci;
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace moeflow::trace
