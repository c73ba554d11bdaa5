// schedule_check: the replay behind check_schedule (policy/schedule_check.h).
// Independent of the planner on purpose: it rebuilds residency, host-copy
// currency and device bytes from the model and the actions alone.
#include "policy/schedule_check.h"

#include <algorithm>
#include <vector>

namespace oversub::policy {

namespace {

struct replay_state {
  bool resident = false;
  bool host_current = false;  // the host copy holds the latest content
  bool has_content = false;
};

class replay {
 public:
  replay(const iteration_model& model, const schedule& plan) : model_(model), plan_(plan) {
    const std::size_t n = model.launches.size();
    last_use_.assign(model.buffers.size(), -1);
    for (std::size_t i = 0; i < n; ++i) {
      for (buffer_id b : model.launches[i].uses) {
        last_use_[b] = std::max(last_use_[b], static_cast<std::int64_t>(i));
      }
    }
  }

  std::string run() {
    const std::size_t n = model_.launches.size();
    if (plan_.launches.size() != n) {
      return "schedule has " + std::to_string(plan_.launches.size()) + " launches, model " +
             std::to_string(n);
    }
    st_.assign(model_.buffers.size(), {});
    for (buffer_id b = 0; b < st_.size(); ++b) {
      st_[b].has_content = st_[b].host_current = model_.buffers[b].long_lived;
    }
    for (buffer_id b : plan_.resident_at_start) {
      if (b >= st_.size() || !model_.buffers[b].long_lived || st_[b].resident) {
        return "resident_at_start holds " + std::to_string(b) +
               ", not a distinct long-lived buffer";
      }
      st_[b].resident = true;
      st_[b].host_current = false;
      used_ += model_.buffers[b].bytes;
    }
    if (std::string e = check_capacity("at the start"); !e.empty()) return e;
    for (const evict_action& e : plan_.evict_at_start) {
      if (std::string err = evict(e, -1); !err.empty()) return err;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t now = static_cast<std::int64_t>(i);
      for (const fetch_action& f : plan_.launches[i].fetch_before) {
        if (std::string e = fetch(f, i, "before launch " + std::to_string(i)); !e.empty()) {
          return e;
        }
      }
      const model_launch& launch = model_.launches[i];
      for (buffer_id b : launch.uses) {
        if (!st_[b].resident) {
          return "launch " + std::to_string(i) + " runs with buffer " + std::to_string(b) +
                 " not resident";
        }
        st_[b].has_content = true;
        if (launch_writes(launch, b)) st_[b].host_current = false;
      }
      for (const evict_action& e : plan_.launches[i].evict_after) {
        if (std::string err = evict(e, now); !err.empty()) return err;
      }
    }
    for (const fetch_action& f : plan_.end_fetches) {
      if (std::string e = fetch(f, n, "at the end"); !e.empty()) return e;
    }
    std::vector<bool> wanted(st_.size(), false);
    for (buffer_id b : plan_.resident_at_start) wanted[b] = true;
    for (buffer_id b = 0; b < st_.size(); ++b) {
      if (st_[b].resident != wanted[b]) {
        return "buffer " + std::to_string(b) + (st_[b].resident ? " resident" : " not resident") +
               " at the end, unlike the start";
      }
    }
    if (peak_ > plan_.planned_peak_bytes) {
      return "replayed peak " + std::to_string(peak_) + " bytes above planned_peak_bytes " +
             std::to_string(plan_.planned_peak_bytes);
    }
    return {};
  }

 private:
  // Content of b needed after launch position `after` (-1: before launch 0)?
  bool needed_later(buffer_id b, std::int64_t after) const {
    return model_.buffers[b].long_lived || last_use_[b] > after;
  }

  std::string check_capacity(const std::string& where) {
    peak_ = std::max(peak_, used_);
    if (used_ > plan_.capacity_bytes) {
      return std::to_string(used_) + " device bytes " + where + ", capacity " +
             std::to_string(plan_.capacity_bytes);
    }
    return {};
  }

  // See Note [Dead gaps] in core/dead_gaps.cc: b's content is dead for the moves before
  // launch q.
  bool dead_at(buffer_id b, std::size_t q) const {
    return std::any_of(model_.dead_windows.begin(), model_.dead_windows.end(),
                       [&](const dead_window& w) {
                         return w.buffer == b &&
                                dead_window_holds(w, q, model_.launches.size());
                       });
  }

  // q: the launch the fetch comes before (the launches' count: at the end).
  std::string fetch(const fetch_action& f, std::size_t q, const std::string& where) {
    const buffer_id b = f.buffer;
    if (b >= st_.size()) return "fetch of unknown buffer " + std::to_string(b) + " " + where;
    replay_state& s = st_[b];
    const std::string name = "buffer " + std::to_string(b) + " ";
    if (s.resident) return name + "fetched while resident " + where;
    if (f.copy_in && !s.host_current) {
      return name + "copied in " + where + " but the host does not hold its content";
    }
    if (!f.copy_in && s.has_content && !dead_at(b, q)) {
      return name + "mapped without copy " + where + ": its content is lost";
    }
    s.resident = true;
    used_ += model_.buffers[b].bytes;
    return check_capacity(where);
  }

  std::string evict(const evict_action& e, std::int64_t after) {
    const buffer_id b = e.buffer;
    const std::string where =
        after < 0 ? std::string("at the start") : "after launch " + std::to_string(after);
    if (b >= st_.size()) return "eviction of unknown buffer " + std::to_string(b) + " " + where;
    replay_state& s = st_[b];
    if (!s.resident) return "buffer " + std::to_string(b) + " evicted while not resident " + where;
    if (e.copy_out || dead_at(b, static_cast<std::size_t>(after + 1))) {
      s.host_current = true;  // copied, or dead: any host copy is as good
    } else if (!s.host_current && s.has_content && needed_later(b, after)) {
      return "buffer " + std::to_string(b) + " evicted without copy " + where +
             " while the host copy is stale and the content is needed later: lost";
    }
    if (!model_.buffers[b].long_lived && !needed_later(b, after)) s.has_content = false;
    s.resident = false;
    used_ -= model_.buffers[b].bytes;
    return {};
  }

  const iteration_model& model_;
  const schedule& plan_;
  std::vector<std::int64_t> last_use_;
  std::vector<replay_state> st_;
  std::size_t used_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace

std::string check_schedule(const iteration_model& model, const schedule& plan) {
  if (std::string e = validate_model(model); !e.empty()) return "invalid model: " + e;
  return replay(model, plan).run();
}

}  // namespace oversub::policy
