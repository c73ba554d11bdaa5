// Tickets: what a freed block must wait for before work on another stream may
// reuse it. Pure types (no CUDA), shared by the sub-allocator and stream_fences.
//
// A ticket (slot, seq) names the seq-th event stream_fences recorded on the stream
// in slot. Events on one stream complete in order, so "slot's completed seq >= seq"
// says the ticket is done. A block keeps at most max_tickets of them, one per slot
// (the later seq wins on a merge); more distinct streams than that, and the block
// waits for a synchronisation (overflow: the arena's last resort waits for every
// recorded event, after which the lost tickets are known done).
#ifndef OVERSUB_POOL_TICKET_H
#define OVERSUB_POOL_TICKET_H

#include <cstdint>

namespace oversub::pool {

inline constexpr std::uint64_t never_completes = ~std::uint64_t{0};  // captured streams

struct ticket {
  std::uint16_t slot = 0;
  std::uint64_t seq = 0;
};

struct ticket_set {
  static constexpr int max_tickets = 8;
  ticket items[max_tickets];
  std::uint8_t count = 0;
  bool overflow = false;  // lost track: reusable only after a full synchronisation

  bool empty() const { return count == 0 && !overflow; }
  void clear() {
    count = 0;
    overflow = false;
  }
  void add(ticket t) {
    for (int i = 0; i < count; ++i) {
      if (items[i].slot == t.slot) {
        if (t.seq > items[i].seq) items[i].seq = t.seq;
        return;
      }
    }
    if (count == max_tickets) {
      overflow = true;
      return;
    }
    items[count++] = t;
  }
  void merge(const ticket_set& other) {
    for (int i = 0; i < other.count; ++i) add(other.items[i]);
    overflow = overflow || other.overflow;
  }
  // Same tickets (as a set).
  bool same_as(const ticket_set& o) const {
    if (count != o.count || overflow != o.overflow) return false;
    for (int i = 0; i < count; ++i) {
      bool found = false;
      for (int j = 0; j < o.count; ++j) {
        found = found || (o.items[j].slot == items[i].slot && o.items[j].seq == items[i].seq);
      }
      if (!found) return false;
    }
    return true;
  }
  // Drops the tickets done(t) says are complete.
  template <typename Done>
  void prune(Done done) {
    int kept = 0;
    for (int i = 0; i < count; ++i) {
      if (!done(items[i])) items[kept++] = items[i];
    }
    count = static_cast<std::uint8_t>(kept);
  }
};

}  // namespace oversub::pool

#endif  // OVERSUB_POOL_TICKET_H
