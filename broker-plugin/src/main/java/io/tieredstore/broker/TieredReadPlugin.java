package io.tieredstore.broker;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.rocketmq.common.BoundaryType;
import org.apache.rocketmq.common.constant.LoggerName;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.logging.org.slf4j.Logger;
import org.apache.rocketmq.logging.org.slf4j.LoggerFactory;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.MessageFilter;
import org.apache.rocketmq.store.MessageStore;
import org.apache.rocketmq.store.exception.ConsumeQueueException;
import org.apache.rocketmq.store.plugin.AbstractPluginMessageStore;
import org.apache.rocketmq.store.plugin.MessageStorePluginContext;

/**
 * The tieredstore broker read plugin: {@code messageStorePlugIn=io.tieredstore.broker.TieredReadPlugin}.
 *
 * <p>It changes only what concerns queue offsets below the broker's hot minimum (the
 * wrapped store's {@code getMinOffsetInQueue}) and passes everything else through:
 * pulls ({@link ColdPulls}), the queue's min offset (cold min when cold holds older
 * offsets), offset by time, earliest and per-offset store times.
 *
 * <p><b>No surprise replays.</b> A broker starts a new consumer group at offset 0 only when
 * {@code getMinOffsetInQueue <= 0} and {@code checkInMemByConsumeOffset(topic, queue, 0, 1)};
 * otherwise the client's {@code CONSUME_FROM_LAST_OFFSET} starts it at the max offset.
 * The plugin lowers the min offset only when the hot min is above 0, and answers
 * {@code checkInMemByConsumeOffset} false below the hot min (as the broker does, the
 * offsets being gone from its store), so a new group with default settings starts
 * exactly where it would without the plugin. Only {@code CONSUME_FROM_FIRST_OFFSET},
 * {@code CONSUME_FROM_TIMESTAMP} or an explicit reset reach into cold.
 */
public class TieredReadPlugin extends AbstractPluginMessageStore {
    private static final Logger LOG = LoggerFactory.getLogger(LoggerName.STORE_LOGGER_NAME);

    private final PluginConfig config;
    private final SidecarClient client;
    private final RangeCache ranges;
    private final QueueBackoff backoff;
    private final Counters counters = new Counters();
    private final BatchCache batches;
    private final ColdPulls pulls;
    private final ThreadPoolExecutor executor;

    public TieredReadPlugin(MessageStorePluginContext context, MessageStore next) {
        super(context, next);
        this.config = new PluginConfig();
        context.registerConfiguration(config);
        String problem = config.problem();
        if (problem != null) {
            throw new IllegalArgumentException("tieredstore plugin: " + problem + " (broker.conf)");
        }
        this.client = new SidecarClient(config);
        this.ranges = new RangeCache(client, config.getTieredstoreRangeCacheMillis());
        this.backoff = new QueueBackoff(config.getTieredstoreBackoffMinMillis(), config.getTieredstoreBackoffMaxMillis());
        this.batches = new BatchCache(client, config.getTieredstoreBatchMessages(),
            config.getTieredstoreBatchCacheBytes());
        this.pulls = new ColdPulls(batches, ranges, backoff, counters, context.getMessageStoreConfig());
        int threads = config.getTieredstoreReadThreads();
        final AtomicInteger n = new AtomicInteger();
        this.executor = new ThreadPoolExecutor(threads, threads, 60, TimeUnit.SECONDS,
            new ArrayBlockingQueue<Runnable>(1024), r -> {
                Thread t = new Thread(r, "TieredReadPlugin-" + n.incrementAndGet());
                t.setDaemon(true);
                return t;
            });
        LOG.info("tieredstore plugin: serving offsets below the hot minimum from {}",
            config.getTieredstoreReadAddress());
    }

    @Override
    public void shutdown() {
        executor.shutdownNow();
        batches.shutdown();
        super.shutdown();
    }

    // -- pulls ----------------------------------------------------------------------------
    @Override
    public GetMessageResult getMessage(String group, String topic, int queueId, long offset,
        int maxMsgNums, MessageFilter messageFilter) {
        return getMessage(group, topic, queueId, offset, maxMsgNums, Integer.MAX_VALUE, messageFilter);
    }

    @Override
    public GetMessageResult getMessage(String group, String topic, int queueId, long offset,
        int maxMsgNums, int maxTotalMsgSize, MessageFilter messageFilter) {
        long hotMin = next.getMinOffsetInQueue(topic, queueId);
        if (hotMin <= 0 || offset >= hotMin) {
            GetMessageResult hot = next.getMessage(group, topic, queueId, offset, maxMsgNums,
                maxTotalMsgSize, messageFilter);
            return hotGone(hot, topic, queueId, offset) ? coldInstead(hot, topic, queueId, offset, maxMsgNums,
                maxTotalMsgSize, messageFilter) : hot;
        }
        GetMessageResult cold = pulls.pull(topic, queueId, offset, hotMin, maxOffset(topic, queueId, hotMin),
            maxMsgNums, maxTotalMsgSize, messageFilter);
        return cold != null ? cold
            : next.getMessage(group, topic, queueId, offset, maxMsgNums, maxTotalMsgSize, messageFilter);
    }

    /**
     * True when the broker's store answered that the offset's data is gone: the broker
     * deleted the file between our look at the hot min and its read (OFFSET_TOO_SMALL,
     * MESSAGE_WAS_REMOVING, OFFSET_FOUND_NULL moving the offset on, or FOUND from a later
     * offset than asked because the records before it were deleted mid-read). The stock
     * answer would move the consumer past those offsets; cold may still hold them.
     */
    boolean hotGone(GetMessageResult hot, String topic, int queueId, long offset) {
        if (hot == null) {
            return false;
        }
        GetMessageStatus status = hot.getStatus();
        if (status == GetMessageStatus.FOUND) {
            // Found, but not from the offset asked for: filtered out, or skipped because
            // the file holding it was deleted during the read. Only the latter is a gap.
            long first = hot.getMessageQueueOffset().isEmpty() ? offset : hot.getMessageQueueOffset().get(0);
            return first > offset && next.getCommitLogOffsetInQueue(topic, queueId, offset) < next.getMinPhyOffset();
        }
        return status == GetMessageStatus.OFFSET_TOO_SMALL
            || status == GetMessageStatus.MESSAGE_WAS_REMOVING
            || status == GetMessageStatus.OFFSET_FOUND_NULL && hot.getNextBeginOffset() != offset;
    }

    /** Serve from cold what the broker just found gone; its own answer if cold does not
     * hold the offset either. Cold reads up to its commit here (the hot min may not have
     * been corrected yet); cold holds the same records the broker had. */
    private GetMessageResult coldInstead(GetMessageResult hot, String topic, int queueId, long offset,
        int maxMsgNums, int maxTotalMsgSize, MessageFilter messageFilter) {
        GetMessageResult cold = pulls.pull(topic, queueId, offset, Long.MAX_VALUE,
            maxOffset(topic, queueId, offset), maxMsgNums, maxTotalMsgSize, messageFilter);
        if (cold == null) {
            return hot;
        }
        hot.release();
        return cold;
    }

    @Override
    public CompletableFuture<GetMessageResult> getMessageAsync(String group, String topic, int queueId,
        long offset, int maxMsgNums, MessageFilter messageFilter) {
        return getMessageAsync(group, topic, queueId, offset, maxMsgNums, Integer.MAX_VALUE, messageFilter);
    }

    @Override
    public CompletableFuture<GetMessageResult> getMessageAsync(String group, String topic, int queueId,
        long offset, int maxMsgNums, int maxTotalMsgSize, MessageFilter messageFilter) {
        final long hotMin = next.getMinOffsetInQueue(topic, queueId);
        if (hotMin <= 0 || offset >= hotMin) {
            return next.getMessageAsync(group, topic, queueId, offset, maxMsgNums, maxTotalMsgSize, messageFilter)
                .thenCompose(hot -> !hotGone(hot, topic, queueId, offset) ? CompletableFuture.completedFuture(hot)
                    : offThePullThreads(() -> coldInstead(hot, topic, queueId, offset, maxMsgNums,
                        maxTotalMsgSize, messageFilter), offset, hotMin, topic, queueId));
        }
        return offThePullThreads(() -> getMessage(group, topic, queueId, offset, maxMsgNums,
            maxTotalMsgSize, messageFilter), offset, hotMin, topic, queueId);
    }

    /** Run a cold read in the plugin's pool: a slow sidecar must not hold the broker's
     * pull threads. A full pool answers "nothing found yet". */
    private CompletableFuture<GetMessageResult> offThePullThreads(Supplier<GetMessageResult> read,
        long offset, long hotMin, String topic, int queueId) {
        try {
            return CompletableFuture.supplyAsync(read, executor);
        } catch (RejectedExecutionException e) {
            counters.pausedPulls.incrementAndGet();
            return CompletableFuture.completedFuture(
                ColdPulls.notFoundYet(offset, hotMin, maxOffset(topic, queueId, hotMin)));
        }
    }

    private long maxOffset(String topic, int queueId, long fallback) {
        try {
            return next.getMaxOffsetInQueue(topic, queueId);
        } catch (ConsumeQueueException e) {
            return fallback;
        }
    }

    // -- offsets ----------------------------------------------------------------------------
    /** The cold min when cold holds offsets below the hot min; the hot min otherwise, and
     * always when the hot min is 0 (see the class comment: no surprise replays). */
    @Override
    public long getMinOffsetInQueue(String topic, int queueId) {
        long hotMin = next.getMinOffsetInQueue(topic, queueId);
        if (hotMin <= 0) {
            return hotMin;
        }
        ColdRange range = quietRange(topic, queueId);
        return range != null && !range.isEmpty() && range.min < hotMin ? range.min : hotMin;
    }

    @Override
    public boolean checkInMemByConsumeOffset(String topic, int queueId, long consumeOffset, int batchSize) {
        if (consumeOffset < next.getMinOffsetInQueue(topic, queueId)) {
            return false; // not in the broker's memory: in cold
        }
        return next.checkInMemByConsumeOffset(topic, queueId, consumeOffset, batchSize);
    }

    @Override
    public long getOffsetInQueueByTime(String topic, int queueId, long timestamp) {
        return getOffsetInQueueByTime(topic, queueId, timestamp, BoundaryType.LOWER);
    }

    /** The hot answer, unless the time is at or before the hot min's message and cold has
     * an answer below the hot min. When the sidecar cannot answer: the hot answer (stock). */
    @Override
    public long getOffsetInQueueByTime(String topic, int queueId, long timestamp, BoundaryType boundaryType) {
        long hot = next.getOffsetInQueueByTime(topic, queueId, timestamp, boundaryType);
        long hotMin = next.getMinOffsetInQueue(topic, queueId);
        if (hotMin <= 0 || hot > hotMin) {
            return hot;
        }
        try {
            long cold = client.offsetByTime(topic, queueId, timestamp, boundaryType == BoundaryType.UPPER);
            return cold < hotMin ? cold : hot;
        } catch (SidecarClient.NotInCold e) {
            return hot;
        } catch (SidecarException e) {
            counters.sidecarErrors.incrementAndGet();
            LOG.warn("tieredstore: offset by time of {}/{} not asked of cold: {}", topic, queueId, e.getMessage());
            return hot;
        }
    }

    @Override
    public long getEarliestMessageTime(String topic, int queueId) {
        long hotMin = next.getMinOffsetInQueue(topic, queueId);
        ColdRange range = hotMin > 0 ? quietRange(topic, queueId) : null;
        if (range != null && !range.isEmpty() && range.min < hotMin) {
            return range.earliestStoreTime;
        }
        return next.getEarliestMessageTime(topic, queueId);
    }

    @Override
    public CompletableFuture<Long> getEarliestMessageTimeAsync(String topic, int queueId) {
        return CompletableFuture.completedFuture(getEarliestMessageTime(topic, queueId));
    }

    @Override
    public long getMessageStoreTimeStamp(String topic, int queueId, long consumeQueueOffset) {
        long hotMin = next.getMinOffsetInQueue(topic, queueId);
        if (hotMin > 0 && consumeQueueOffset < hotMin) {
            try {
                return storeTimestamp(client.records(topic, queueId, consumeQueueOffset, 1, 1).record(0));
            } catch (SidecarClient.NotInCold e) {
                // not in cold either: as the broker answers
            } catch (SidecarException e) {
                counters.sidecarErrors.incrementAndGet();
                LOG.warn("tieredstore: store time of {}/{}@{} not read from cold: {}", topic, queueId,
                    consumeQueueOffset, e.getMessage());
            }
        }
        return next.getMessageStoreTimeStamp(topic, queueId, consumeQueueOffset);
    }

    @Override
    public CompletableFuture<Long> getMessageStoreTimeStampAsync(String topic, int queueId, long consumeQueueOffset) {
        return CompletableFuture.completedFuture(getMessageStoreTimeStamp(topic, queueId, consumeQueueOffset));
    }

    /** storeTimestamp of a raw record: after sysFlag (36), bornTimestamp (40) and a born
     * host of 8 bytes (IPv4) or 20 (IPv6). */
    static long storeTimestamp(ByteBuffer record) {
        int sysFlag = record.getInt(36);
        int bornHost = (sysFlag & MessageSysFlag.BORNHOST_V6_FLAG) == 0 ? 8 : 20;
        return record.getLong(48 + bornHost);
    }

    private ColdRange quietRange(String topic, int queueId) {
        long now = System.currentTimeMillis();
        String key = QueueBackoff.key(topic, queueId);
        if (backoff.paused(key, now)) {
            return ranges.last(topic, queueId);
        }
        try {
            return ranges.get(topic, queueId, now);
        } catch (SidecarException e) {
            counters.sidecarErrors.incrementAndGet();
            backoff.failed(key, now);
            return ranges.last(topic, queueId);
        }
    }

    @Override
    public HashMap<String, String> getRuntimeInfo() {
        HashMap<String, String> info = next.getRuntimeInfo();
        counters.putInto(info);
        info.put("tieredstoreBatchBytesKept", String.valueOf(batches.bytes()));
        return info;
    }
}
