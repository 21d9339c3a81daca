// At most `capacity` values by key, the least recently used dropped first (its destructor, after
// `evict` where given, runs then): open files held on demand (open_files.h). Not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <utility>

namespace shardtune::common {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity, std::function<void(Value&)> evict = {})
      : capacity_(capacity < 1 ? 1 : capacity), evict_(std::move(evict)) {}

  // The value for `key`, made by `make()` when not held. The reference stays valid until the next
  // get() or clear().
  template <class Make>
  Value& get(const Key& key, Make&& make) {
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    while (order_.size() >= capacity_) drop_last();
    order_.emplace_front(key, make());
    index_[key] = order_.begin();
    return order_.front().second;
  }
  // Drops every value, most recently used last.
  void clear() {
    while (!order_.empty()) drop_last();
  }
  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  void drop_last() {
    auto last = std::prev(order_.end());
    index_.erase(last->first);
    // Removed before `evict` runs, so that a throwing evict leaves the cache consistent.
    std::pair<Key, Value> gone = std::move(*last);
    order_.erase(last);
    if (evict_) evict_(gone.second);
  }

  size_t capacity_;
  std::function<void(Value&)> evict_;
  std::list<std::pair<Key, Value>> order_;  // most recently used first
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace shardtune::common
