package io.tieredstore.broker;

import java.util.concurrent.ConcurrentHashMap;

/**
 * Per-queue pauses after the sidecar failed: while a queue is paused its cold pulls are
 * answered "nothing found yet" without asking the sidecar, so long-polling consumers
 * retrying every few seconds do not hammer a sidecar that is down. The pause doubles
 * with each failure in a row (from min to max) and ends at the first success.
 */
final class QueueBackoff {
    private static final class State {
        final int failures;
        final long until;

        State(int failures, long until) {
            this.failures = failures;
            this.until = until;
        }
    }

    private final long minMillis;
    private final long maxMillis;
    private final ConcurrentHashMap<String, State> states = new ConcurrentHashMap<>();

    QueueBackoff(long minMillis, long maxMillis) {
        this.minMillis = minMillis;
        this.maxMillis = maxMillis;
    }

    static String key(String topic, int queueId) {
        return topic + "\u0000" + queueId;
    }

    boolean paused(String key, long now) {
        State s = states.get(key);
        return s != null && now < s.until;
    }

    /** Record a failure; return the pause it starts, in milliseconds. */
    long failed(String key, long now) {
        State s = states.compute(key, (k, old) -> {
            int failures = old == null ? 1 : Math.min(old.failures + 1, 30);
            long pause = Math.min(maxMillis, minMillis << Math.min(failures - 1, 20));
            return new State(failures, now + pause);
        });
        return s.until - now;
    }

    void succeeded(String key) {
        states.remove(key);
    }
}
