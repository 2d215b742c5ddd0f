package io.tieredstore.broker;

import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * Bigger reads per request. A pull wants a consumer-sized batch (the broker's
 * {@code maxTransferCountOnMessageInMemory}, 32 by default); asking the sidecar for that
 * little costs one HTTP round trip per pull. Instead the sidecar is asked for up to
 * {@code tieredstoreBatchMessages} records at once, and the rest is kept, one batch per
 * queue, for that queue's next pulls: a consumer draining history pays one round trip
 * per batch, not per pull. Once a queue's pulls have used half of its batch, the next
 * batch is fetched in the background (two threads of its own, never the pull threads),
 * so a sequential consumer seldom waits for the sidecar at all. A background fetch that
 * fails is forgotten: the pull that needs the offsets asks the sidecar itself, and its
 * failure is handled as any other (ColdPulls: "nothing found yet", back-off).
 *
 * <p>Committed cold records never change, so a kept batch is never stale; retention may
 * delete them while kept, and a pull is then answered from memory with what cold held
 * (the next range read moves the consumer on). Kept batches are evicted least recently
 * used first while their bytes exceed {@code tieredstoreBatchCacheBytes}; 0 turns the
 * cache off (every pull asks the sidecar for exactly what it needs). Thread-safe.
 */
final class BatchCache {
    /** The byte limit of one request for a batch (the sidecar caps it at 16 MiB). */
    static final int BATCH_BYTES = 2 << 20;

    private final SidecarClient client;
    private final int batchMessages;
    private final long capacityBytes;
    private final LinkedHashMap<String, ColdBatch> batches = new LinkedHashMap<>(16, 0.75f, true);
    /** The batch being fetched in the background for each queue, at most one. */
    private final HashMap<String, CompletableFuture<ColdBatch>> ahead = new HashMap<>();
    private final ThreadPoolExecutor fetcher;
    private long bytes;

    BatchCache(SidecarClient client, int batchMessages, long capacityBytes) {
        this.client = client;
        this.batchMessages = batchMessages;
        this.capacityBytes = capacityBytes;
        this.fetcher = new ThreadPoolExecutor(2, 2, 60, TimeUnit.SECONDS,
            new ArrayBlockingQueue<Runnable>(64), r -> {
                Thread t = new Thread(r, "TieredReadPlugin-ahead");
                t.setDaemon(true);
                return t;
            });
    }

    void shutdown() {
        fetcher.shutdownNow();
    }

    /** Records of the queue from {@code offset}: at most {@code maxCount}, and stopping
     * before the record that would take them past {@code maxBytes} (at least one), as
     * {@link SidecarClient#records} answers; from a kept batch when one holds the offset. */
    ColdBatch records(String topic, int queueId, long offset, int maxCount, int maxBytes)
        throws SidecarException, SidecarClient.NotInCold {
        if (capacityBytes <= 0 || batchMessages <= maxCount) {
            return client.records(topic, queueId, offset, maxCount, maxBytes);
        }
        String key = QueueBackoff.key(topic, queueId);
        ColdBatch kept;
        CompletableFuture<ColdBatch> next;
        synchronized (this) {
            kept = batches.get(key);
            next = covers(kept, offset) ? null : ahead.remove(key);
        }
        if (!covers(kept, offset)) {
            kept = next == null ? null : settled(next);
            if (!covers(kept, offset)) {
                kept = client.records(topic, queueId, offset, batchMessages, Math.max(maxBytes, BATCH_BYTES));
            }
            keep(key, kept);
        }
        ColdBatch view = view(kept, offset, maxCount, maxBytes);
        long end = kept.offset + kept.count();
        if (end - (view.offset + view.count()) <= kept.count() / 2) {
            fetchAhead(key, topic, queueId, end, Math.max(maxBytes, BATCH_BYTES));
        }
        return view;
    }

    private static boolean covers(ColdBatch batch, long offset) {
        return batch != null && offset >= batch.offset && offset < batch.offset + batch.count();
    }

    /** The background fetch's batch, waiting for it if need be; null if it failed. */
    private static ColdBatch settled(CompletableFuture<ColdBatch> next) {
        try {
            return next.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        } catch (ExecutionException e) {
            return null;
        }
    }

    /** Start fetching the queue's batch from {@code from} unless one is on its way, or
     * the kept batches already fill the cache. */
    private void fetchAhead(String key, String topic, int queueId, long from, int fetchBytes) {
        synchronized (this) {
            CompletableFuture<ColdBatch> pending = ahead.get(key);
            if (pending != null || bytes + fetchBytes > capacityBytes) {
                return;
            }
            CompletableFuture<ColdBatch> f = new CompletableFuture<>();
            try {
                fetcher.execute(() -> {
                    try {
                        f.complete(client.records(topic, queueId, from, batchMessages, fetchBytes));
                    } catch (SidecarException | SidecarClient.NotInCold | RuntimeException e) {
                        f.complete(null); // past cold commit, or the sidecar failed: the pull asks
                    }
                });
            } catch (RejectedExecutionException e) {
                return;
            }
            ahead.put(key, f);
        }
    }

    /** Forget what is kept of the queue (cold changed under it: retention). */
    synchronized void invalidate(String topic, int queueId) {
        ahead.remove(QueueBackoff.key(topic, queueId));
        ColdBatch gone = batches.remove(QueueBackoff.key(topic, queueId));
        if (gone != null) {
            bytes -= gone.bytes();
        }
    }

    synchronized long bytes() {
        return bytes;
    }

    private synchronized void keep(String key, ColdBatch batch) {
        ColdBatch old = batches.put(key, batch);
        bytes += batch.bytes() - (old == null ? 0 : old.bytes());
        Iterator<Map.Entry<String, ColdBatch>> it = batches.entrySet().iterator();
        while (bytes > capacityBytes && it.hasNext()) {
            Map.Entry<String, ColdBatch> eldest = it.next();
            if (eldest.getValue() != batch) {
                bytes -= eldest.getValue().bytes();
                it.remove();
            }
        }
    }

    static ColdBatch view(ColdBatch batch, long offset, int maxCount, int maxBytes) {
        int from = (int) (offset - batch.offset);
        int to = from;
        long size = 0;
        while (to < batch.count() && to - from < maxCount
            && (to == from || size + batch.sizes[to] <= maxBytes)) {
            size += batch.sizes[to];
            to++;
        }
        return from == 0 && to == batch.count() ? batch : batch.slice(from, to);
    }
}
