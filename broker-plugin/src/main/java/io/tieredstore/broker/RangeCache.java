package io.tieredstore.broker;

import java.util.concurrent.ConcurrentHashMap;

/**
 * Each queue's cold range, reused for {@code ttlMillis}. Cold only grows at its end and
 * shrinks at its start (retention), so a range a second old can only be wrong by what
 * was tiered or expired in that second: a read past a stale commit is answered by the
 * sidecar (404, then the range is refreshed), a read below a stale min likewise.
 *
 * <p>An empty range (a queue the sidecar does not tier: system topics, filtered topics)
 * is kept {@link #EMPTY_TTL_MILLIS}: the broker asks for the min offset of every queue
 * for its lag metrics, and those queues never get a cold range.
 */
final class RangeCache {
    private static final class Entry {
        final ColdRange range;
        final long at;

        Entry(ColdRange range, long at) {
            this.range = range;
            this.at = at;
        }
    }

    static final long EMPTY_TTL_MILLIS = 30_000;

    private final SidecarClient client;
    private final long ttlMillis;
    private final ConcurrentHashMap<String, Entry> entries = new ConcurrentHashMap<>();

    RangeCache(SidecarClient client, long ttlMillis) {
        this.client = client;
        this.ttlMillis = ttlMillis;
    }

    /** The queue's range, from the cache while fresh, else from the sidecar. */
    ColdRange get(String topic, int queueId, long now) throws SidecarException {
        String key = QueueBackoff.key(topic, queueId);
        Entry e = entries.get(key);
        if (e != null && now - e.at < (e.range.isEmpty() ? Math.max(ttlMillis, EMPTY_TTL_MILLIS) : ttlMillis)) {
            return e.range;
        }
        ColdRange range = client.range(topic, queueId);
        entries.put(key, new Entry(range, now));
        return range;
    }

    /** The last range the sidecar gave for the queue, however old; null if none. */
    ColdRange last(String topic, int queueId) {
        Entry e = entries.get(QueueBackoff.key(topic, queueId));
        return e == null ? null : e.range;
    }

    void invalidate(String topic, int queueId) {
        entries.remove(QueueBackoff.key(topic, queueId));
    }
}
