/*
 * Test-only client for the broker tests and bench/serving_consumer.py
 * (tests/support/broker/rocketmq.py compiles and runs it against the jars the test POM
 * resolves). It drives a real Apache RocketMQ broker
 * with the stock Java client and admin API and writes down what the broker answered, so the
 * Python tests know exactly what was produced and where the broker put it.
 *
 * Sub-commands (all files are UTF-8, tab-separated, one record a line):
 *
 *   create-topics NAMESRV BROKER_ADDR TOPIC:QUEUES...
 *       Create or update topics (read = write = QUEUES) and wait until the name server
 *       routes every one of them.
 *
 *   produce NAMESRV PLAN RESULTS
 *       Send every message of PLAN and write one result line per message to RESULTS.
 *       PLAN columns:  index kind topic tags_b64 keys_b64 props_b64 body_b64 arg
 *         kind   normal | delay (arg = delay level) | timer (arg = delay ms)
 *                | tx_commit | tx_rollback (transactional: local transaction outcome)
 *                | batch (arg = batch id: the lines of one id are sent together with
 *                  send(Collection), one batch record per message, consecutive offsets)
 *         *_b64  base64 of UTF-8 text (body: of the raw bytes); an empty column means none.
 *                props is "k\u0001v\u0002" repeated, keys is space-separated.
 *       RESULTS columns: index status msgId offsetMsgId brokerName queueId queueOffset
 *
 *   fail-once NAMESRV BROKER_ADDR GROUP TOPIC TAG EXPECTED_FAILURES TIMEOUT_MS
 *       Consume TOPIC in push mode as GROUP from the first offset. Every message tagged TAG
 *       fails on its first delivery with delay level 1: the broker parks it in
 *       SCHEDULE_TOPIC_XXXX and one second later writes it to %RETRY%GROUP, where it is
 *       consumed again and succeeds. Returns once %RETRY%GROUP holds EXPECTED_FAILURES
 *       messages. A GROUP longer than 120 characters makes the retry topic longer than
 *       127, the only way a 5.x broker accepts such a topic (the record gets magic v2).
 *
 *   trickle NAMESRV TOPIC RATE SECONDS BODY_BYTES TAG RESULTS
 *       Send plain messages to TOPIC one at a time, RATE per second for SECONDS (a steady
 *       stream, not a burst), bodies of BODY_BYTES that start with "TAG/<index>/" (so a
 *       second run with another TAG writes different bytes at reused offsets). One result
 *       line per message, flushed as it is written (the caller may kill the tool):
 *         index status queueId queueOffset sendStartMs sendEndMs
 *       A send that fails (e.g. the broker is frozen) is "index FAILED -1 -1 start end".
 *
 *   stats NAMESRV BROKER_ADDR OUT TOPIC...
 *       Write the broker's own min/max offsets per queue (getTopicStatsInfo), one line per
 *       queue: topic queueId minOffset maxOffset lastUpdateTimestamp.
 *
 *   dump NAMESRV BROKER_ADDR OUT TOPIC...
 *       Wait until the name server routes every TOPIC, then for every queue: one "S" line (S topic queueId min max, as the broker
 *       reports them), then every message from min to max pulled with the stock pull
 *       consumer, one "M" line each: M topic queueId queueOffset msgId offsetMsgId
 *       storeTimestamp tags_b64 keys_b64 props_b64 bodySha256 bodyLength (props: every
 *       property as "k\u0001v\u0002", sorted by name).
 *
 *   query-keys NAMESRV OUT TOPIC KEY...
 *       queryMsgByKey for each KEY (begin 0, end Long.MAX_VALUE; "uniq:ID" looks up the
 *       client message id ID, as queryMsgById does): one line per message found (KEY topic
 *       queueId queueOffset), or "KEY - - -" when none is.
 *
 *   consume-group NAMESRV GROUP TOPIC EXPECTED TIMEOUT_MS OUT
 *       Consume TOPIC in push mode as GROUP (from the first offset if the group has
 *       none) until EXPECTED distinct messages arrived; write "queueId queueOffset" per
 *       message, then shut down, which commits the group's offsets to the broker.
 *
 *   consume NAMESRV MODE GROUP TOPIC FROM SUB EXPECTED FRESH TIMEOUT_MS OUT
 *       Consume TOPIC as a new GROUP with the stock client, MODE push (an orderly push
 *       consumer: deliveries in queue order), push-slow (the same, pulling 8 messages
 *       every 200 ms), push-concurrent (a concurrent listener: it decides its start offsets
 *       once, at rebalance; an orderly one asks again at its first pull) or lite
 *       (DefaultLitePullConsumer), subscribed
 *       to SUB ("*", a tag expression, or "sql:EXPR": MessageSelector.bySql(EXPR), SQL92
 *       on user properties, which needs enablePropertyFilter=true), starting FROM first | last | default (the
 *       client's default, CONSUME_FROM_LAST_OFFSET) | timestamp:MS. With FRESH > 0, once
 *       the consumer holds every queue (its start offsets are decided), send FRESH
 *       messages tagged "fresh". Write one "M" line (as dump) per delivery, duplicates
 *       included, flushed as it arrives; return once EXPECTED distinct queue offsets
 *       arrived and nothing more came for two seconds.
 *
 *   drain NAMESRV TOPIC QUEUE_ID MAX_NUMS OUT
 *       Pull one queue with the stock pull consumer from the min offset the broker reports
 *       to the max offset it reported at the start, MAX_NUMS per pull, one pull at a time.
 *       One line per pull: offset count nanos (the pull's round trip), then a last line
 *       "E min max". For the serving benchmark (cold part vs hot part).
 *
 *   expire NAMESRV BROKER_ADDR
 *       Make the broker delete its old commitlog files now, as its own expiry does: set
 *       fileReservedTime=0 (updateBrokerConfig) and ask for deleteExpiredCommitLog. The
 *       broker keeps its newest file.
 *
 *   reset-by-time NAMESRV GROUP TOPIC TIMESTAMP_MS
 *       mqadmin resetOffsetByTime: the broker finds each queue's offset for the time
 *       (getOffsetInQueueByTime) and stores it as GROUP's offset (force).
 *
 * Exit status 0 on success; any failure prints a stack trace and exits 1.
 */

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class BrokerTool {
    private static final int SEND_THREADS = 8;

    private BrokerTool() {
    }

    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "create-topics":
                    createTopics(args[1], args[2], slice(args, 3));
                    break;
                case "produce":
                    produce(args[1], Paths.get(args[2]), Paths.get(args[3]));
                    break;
                case "fail-once":
                    failOnce(args[1], args[2], args[3], args[4], args[5],
                        Integer.parseInt(args[6]), Long.parseLong(args[7]));
                    break;
                case "stats":
                    stats(args[1], args[2], Paths.get(args[3]), slice(args, 4));
                    break;
                case "dump":
                    dump(args[1], args[2], Paths.get(args[3]), slice(args, 4));
                    break;
                case "query-keys":
                    queryKeys(args[1], Paths.get(args[2]), args[3], slice(args, 4));
                    break;
                case "consume-group":
                    consumeGroup(args[1], args[2], args[3], Integer.parseInt(args[4]),
                        Long.parseLong(args[5]), Paths.get(args[6]));
                    break;
                case "trickle":
                    trickle(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]), args[6], Paths.get(args[7]));
                    break;
                case "consume":
                    Consume.run(args[1], args[2], args[3], args[4], args[5], args[6],
                        Integer.parseInt(args[7]), Integer.parseInt(args[8]),
                        Long.parseLong(args[9]), Paths.get(args[10]));
                    break;
                case "drain":
                    drain(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        Paths.get(args[5]));
                    break;
                case "expire":
                    expire(args[1], args[2]);
                    break;
                case "reset-by-time":
                    resetByTime(args[1], args[2], args[3], Long.parseLong(args[4]));
                    break;
                default:
                    throw new IllegalArgumentException("unknown sub-command " + args[0]);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
        // Client threads are not all daemons; leave without waiting for them.
        System.exit(0);
    }

    private static List<String> slice(String[] args, int from) {
        List<String> out = new ArrayList<>();
        for (int i = from; i < args.length; i++) {
            out.add(args[i]);
        }
        return out;
    }

    private static DefaultMQAdminExt admin(String namesrv) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(5000);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("tool-admin-" + System.nanoTime());
        admin.start();
        return admin;
    }

    // -- create-topics ------------------------------------------------------------------
    private static void createTopics(String namesrv, String brokerAddr, List<String> specs)
        throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        try {
            for (String spec : specs) {
                int colon = spec.lastIndexOf(':');
                String topic = spec.substring(0, colon);
                int queues = Integer.parseInt(spec.substring(colon + 1));
                TopicConfig config = new TopicConfig(topic, queues, queues, 6);
                admin.createAndUpdateTopicConfig(brokerAddr, config);
            }
            List<String> topics = new ArrayList<>();
            for (String spec : specs) {
                topics.add(spec.substring(0, spec.lastIndexOf(':')));
            }
            awaitRoutes(admin, topics);
        } finally {
            admin.shutdown();
        }
    }

    /** Wait (30 s at most) until the name server routes every topic. */
    private static void awaitRoutes(DefaultMQAdminExt admin, List<String> topics) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        for (String topic : topics) {
            while (true) {
                try {
                    admin.examineTopicRouteInfo(topic);
                    break;
                } catch (Exception notYet) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("no route for " + topic, notYet);
                    }
                    Thread.sleep(200);
                }
            }
        }
    }

    // -- produce ------------------------------------------------------------------------
    private static final class Planned {
        final int index;
        final String kind;
        final Message message;
        final long arg;

        Planned(int index, String kind, Message message, long arg) {
            this.index = index;
            this.kind = kind;
            this.message = message;
            this.arg = arg;
        }
    }

    private static String text(String b64) {
        return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8);
    }

    private static Planned parse(String line) {
        String[] f = line.split("\t", -1);
        int index = Integer.parseInt(f[0]);
        String kind = f[1];
        Message msg = new Message(f[2], Base64.getDecoder().decode(f[6]));
        if (!f[3].isEmpty()) {
            msg.setTags(text(f[3]));
        }
        if (!f[4].isEmpty()) {
            msg.setKeys(text(f[4]));
        }
        if (!f[5].isEmpty()) {
            for (String pair : text(f[5]).split("\u0002")) {
                if (pair.isEmpty()) {
                    continue;
                }
                int sep = pair.indexOf('\u0001');
                msg.putUserProperty(pair.substring(0, sep), pair.substring(sep + 1));
            }
        }
        if (kind.equals("delay")) {
            msg.setDelayTimeLevel(Integer.parseInt(f[7]));
        } else if (kind.equals("timer")) {
            msg.setDelayTimeMs(Long.parseLong(f[7]));
        }
        return new Planned(index, kind, msg, f[7].isEmpty() ? 0 : Long.parseLong(f[7]));
    }

    /** One send(Collection) for the batch; a batch's SendResult lists its ids with commas
     * and gives the first offset: split them into one result line per message. */
    private static void sendBatch(DefaultMQProducer producer, List<Planned> batch,
        Map<Integer, String> out) throws Exception {
        List<Message> messages = new ArrayList<>();
        for (Planned p : batch) {
            messages.add(p.message);
        }
        SendResult r = producer.send(messages);
        String[] ids = r.getMsgId().split(",");
        String[] offsetIds = r.getOffsetMsgId().split(",");
        if (ids.length != batch.size() || offsetIds.length != batch.size()) {
            throw new IllegalStateException("batch of " + batch.size() + " got ids " + r.getMsgId());
        }
        for (int i = 0; i < batch.size(); i++) {
            out.put(batch.get(i).index, batch.get(i).index + "\t" + r.getSendStatus() + "\t" + ids[i]
                + "\t" + offsetIds[i] + "\t" + r.getMessageQueue().getBrokerName() + "\t"
                + r.getMessageQueue().getQueueId() + "\t" + (r.getQueueOffset() + i));
        }
    }

    private static String resultLine(int index, SendResult r) {
        return index + "\t" + r.getSendStatus() + "\t" + r.getMsgId() + "\t" + r.getOffsetMsgId()
            + "\t" + r.getMessageQueue().getBrokerName() + "\t" + r.getMessageQueue().getQueueId()
            + "\t" + r.getQueueOffset();
    }

    private static void produce(String namesrv, Path plan, Path results) throws Exception {
        List<Planned> plain = new ArrayList<>();
        List<Planned> transactional = new ArrayList<>();
        Map<Long, List<Planned>> batches = new TreeMap<>();
        for (String line : Files.readAllLines(plan, StandardCharsets.UTF_8)) {
            if (line.isEmpty()) {
                continue;
            }
            Planned p = parse(line);
            if (p.kind.equals("batch")) {
                batches.computeIfAbsent(p.arg, k -> new ArrayList<>()).add(p);
            } else {
                (p.kind.startsWith("tx_") ? transactional : plain).add(p);
            }
        }
        Map<Integer, String> out = new ConcurrentHashMap<>();

        DefaultMQProducer producer = new DefaultMQProducer("tieredstore_test_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("tool-producer-" + System.nanoTime());
        producer.setSendMsgTimeout(10_000);
        // Retries follow errors that stored nothing (busy, connection refused). A timeout
        // uses up the whole 10 s budget, so it is never retried into a duplicate.
        producer.setRetryTimesWhenSendFailed(2);
        producer.start();
        ExecutorService pool = Executors.newFixedThreadPool(SEND_THREADS);
        try {
            // Batches first, in id order: they land at the oldest offsets.
            for (List<Planned> batch : batches.values()) {
                sendBatch(producer, batch, out);
            }
            List<Future<?>> futures = new ArrayList<>();
            for (Planned p : plain) {
                futures.add(pool.submit(() -> {
                    SendResult r = producer.send(p.message);
                    out.put(p.index, resultLine(p.index, r));
                    return null;
                }));
            }
            for (Future<?> f : futures) {
                f.get();
            }
        } finally {
            pool.shutdown();
            producer.shutdown();
        }

        if (!transactional.isEmpty()) {
            TransactionMQProducer tx = new TransactionMQProducer("tieredstore_test_tx_producer");
            tx.setNamesrvAddr(namesrv);
            tx.setInstanceName("tool-tx-" + System.nanoTime());
            tx.setSendMsgTimeout(10_000);
            tx.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    return (LocalTransactionState) arg;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    String outcome = msg.getUserProperty("tx_outcome");
                    return "commit".equals(outcome)
                        ? LocalTransactionState.COMMIT_MESSAGE
                        : LocalTransactionState.ROLLBACK_MESSAGE;
                }
            });
            tx.start();
            try {
                for (Planned p : transactional) {
                    LocalTransactionState outcome = p.kind.equals("tx_commit")
                        ? LocalTransactionState.COMMIT_MESSAGE
                        : LocalTransactionState.ROLLBACK_MESSAGE;
                    SendResult r = tx.sendMessageInTransaction(p.message, outcome);
                    out.put(p.index, resultLine(p.index, r));
                }
            } finally {
                tx.shutdown();
            }
        }

        int batched = 0;
        for (List<Planned> batch : batches.values()) {
            batched += batch.size();
        }
        try (BufferedWriter w = Files.newBufferedWriter(results, StandardCharsets.UTF_8)) {
            for (int i = 0; i < plain.size() + transactional.size() + batched; i++) {
                String line = out.get(i);
                if (line == null) {
                    throw new IllegalStateException("no send result for plan line " + i);
                }
                w.write(line);
                w.write('\n');
            }
        }
    }

    // -- trickle ----------------------------------------------------------------------
    private static void trickle(String namesrv, String topic, int rate, int seconds,
        int bodyBytes, String tag, Path results) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("tieredstore_trickle_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("tool-trickle-" + System.nanoTime());
        producer.setSendMsgTimeout(5_000);
        producer.setRetryTimesWhenSendFailed(0);
        producer.start();
        long total = (long) rate * seconds;
        long start = System.currentTimeMillis();
        try (BufferedWriter w = Files.newBufferedWriter(results, StandardCharsets.UTF_8)) {
            for (long i = 0; i < total; i++) {
                long wait = start + i * 1000L / rate - System.currentTimeMillis();
                if (wait > 0) {
                    Thread.sleep(wait);
                }
                StringBuilder body = new StringBuilder(tag + "/" + i + "/");
                while (body.length() < bodyBytes) {
                    body.append('x');
                }
                long t0 = System.currentTimeMillis();
                String line;
                try {
                    Message m = new Message(topic, "trickle",
                        body.toString().getBytes(StandardCharsets.UTF_8));
                    SendResult r = producer.send(m);
                    line = i + "\t" + r.getSendStatus() + "\t" + r.getMessageQueue().getQueueId()
                        + "\t" + r.getQueueOffset();
                } catch (Exception e) {
                    line = i + "\tFAILED\t-1\t-1";
                }
                w.write(line + "\t" + t0 + "\t" + System.currentTimeMillis() + "\n");
                w.flush();
            }
        } finally {
            producer.shutdown();
        }
    }

    // -- fail-once --------------------------------------------------------------------
    private static long queuedMessages(DefaultMQAdminExt admin, String brokerAddr, String topic) {
        try {
            long total = 0;
            for (TopicOffset o : admin.examineTopicStats(brokerAddr, topic).getOffsetTable()
                .values()) {
                total += o.getMaxOffset() - o.getMinOffset();
            }
            return total;
        } catch (Exception notCreatedYet) {
            return 0;
        }
    }

    private static void failOnce(String namesrv, String brokerAddr, String group, String topic,
        String failTag, int expected, long timeoutMs) throws Exception {
        AtomicInteger seen = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tool-consumer-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            seen.addAndGet(msgs.size());
            for (MessageExt m : msgs) {
                if (failTag.equals(m.getTags()) && m.getReconsumeTimes() == 0) {
                    // Level 1 = 1 s instead of the broker's default 3 + reconsumeTimes.
                    context.setDelayLevelWhenNextConsume(1);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.start();
        DefaultMQAdminExt admin = admin(namesrv);
        try {
            String retry = "%RETRY%" + group;
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (queuedMessages(admin, brokerAddr, retry) < expected) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(retry + " did not reach " + expected
                        + " messages (consumed " + seen.get() + ")");
                }
                Thread.sleep(200);
            }
        } finally {
            admin.shutdown();
            consumer.shutdown();
        }
    }

    // -- stats --------------------------------------------------------------------------
    private static void stats(String namesrv, String brokerAddr, Path outFile, List<String> topics)
        throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        try (BufferedWriter w = Files.newBufferedWriter(outFile, StandardCharsets.UTF_8)) {
            for (String topic : topics) {
                TopicStatsTable table = admin.examineTopicStats(brokerAddr, topic);
                for (Map.Entry<MessageQueue, TopicOffset> e : table.getOffsetTable().entrySet()) {
                    TopicOffset o = e.getValue();
                    w.write(topic + "\t" + e.getKey().getQueueId() + "\t" + o.getMinOffset() + "\t"
                        + o.getMaxOffset() + "\t" + o.getLastUpdateTimestamp() + "\n");
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    // -- dump ---------------------------------------------------------------------------
    private static String b64(String text) {
        return text == null || text.isEmpty() ? ""
            : Base64.getEncoder().encodeToString(text.getBytes(StandardCharsets.UTF_8));
    }

    private static String sha256(byte[] body) throws Exception {
        byte[] d = java.security.MessageDigest.getInstance("SHA-256").digest(body);
        StringBuilder sb = new StringBuilder();
        for (byte b : d) {
            sb.append(String.format("%02x", b));
        }
        return sb.toString();
    }

    private static String offsetMsgId(MessageExt m) {
        return m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId();
    }

    private static String messageLine(MessageExt m) throws Exception {
        StringBuilder props = new StringBuilder();
        for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
            props.append(e.getKey()).append('\u0001').append(e.getValue()).append('\u0002');
        }
        return "M\t" + m.getTopic() + "\t" + m.getQueueId() + "\t" + m.getQueueOffset() + "\t"
            + m.getMsgId() + "\t" + offsetMsgId(m) + "\t" + m.getStoreTimestamp() + "\t"
            + b64(m.getTags()) + "\t" + b64(m.getKeys()) + "\t" + b64(props.toString()) + "\t"
            + sha256(m.getBody()) + "\t" + m.getBody().length + "\n";
    }

    @SuppressWarnings("deprecation")
    private static void dump(String namesrv, String brokerAddr, Path outFile, List<String> topics)
        throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("tool_dump_" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tool-dump-" + System.nanoTime());
        consumer.start();
        awaitRoutes(admin, topics); // a broker that just booted registers a moment later
        try (BufferedWriter w = Files.newBufferedWriter(outFile, StandardCharsets.UTF_8)) {
            for (String topic : topics) {
                consumer.fetchSubscribeMessageQueues(topic); // routes the pulls to the broker
                TopicStatsTable table = admin.examineTopicStats(brokerAddr, topic);
                for (Map.Entry<MessageQueue, TopicOffset> e : new TreeMap<>(table.getOffsetTable())
                    .entrySet()) {
                    MessageQueue mq = e.getKey();
                    long min = e.getValue().getMinOffset();
                    long max = e.getValue().getMaxOffset();
                    w.write("S\t" + topic + "\t" + mq.getQueueId() + "\t" + min + "\t" + max + "\n");
                    long offset = min;
                    while (offset < max) {
                        PullResult r = consumer.pull(mq, "*", offset, 32);
                        if (r.getPullStatus() != PullStatus.FOUND) {
                            throw new IllegalStateException("pull " + mq + " at " + offset + ": "
                                + r.getPullStatus() + " next " + r.getNextBeginOffset());
                        }
                        for (MessageExt m : r.getMsgFoundList()) {
                            w.write(messageLine(m));
                        }
                        offset = r.getNextBeginOffset();
                    }
                }
            }
        } finally {
            consumer.shutdown();
            admin.shutdown();
        }
    }

    @SuppressWarnings("deprecation")
    private static void drain(String namesrv, String topic, int queueId, int maxNums, Path outFile)
        throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("tool_drain_" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tool-drain-" + System.nanoTime());
        consumer.start();
        try (BufferedWriter w = Files.newBufferedWriter(outFile, StandardCharsets.UTF_8)) {
            MessageQueue mq = null;
            for (MessageQueue q : consumer.fetchSubscribeMessageQueues(topic)) {
                if (q.getQueueId() == queueId) {
                    mq = q;
                }
            }
            if (mq == null) {
                throw new IllegalArgumentException("no queue " + queueId + " in " + topic);
            }
            long min = consumer.minOffset(mq);
            long max = consumer.maxOffset(mq);
            long offset = min;
            while (offset < max) {
                long t0 = System.nanoTime();
                PullResult r = consumer.pull(mq, "*", offset, maxNums);
                long nanos = System.nanoTime() - t0;
                if (r.getPullStatus() != PullStatus.FOUND) {
                    throw new IllegalStateException("pull " + mq + " at " + offset + ": "
                        + r.getPullStatus() + " next " + r.getNextBeginOffset());
                }
                w.write(offset + "\t" + r.getMsgFoundList().size() + "\t" + nanos + "\n");
                offset = r.getNextBeginOffset();
            }
            w.write("E\t" + min + "\t" + max + "\n");
        } finally {
            consumer.shutdown();
        }
    }

    // -- query-keys ---------------------------------------------------------------------
    private static final String UNIQ = "uniq:";

    private static void queryKeys(String namesrv, Path outFile, String topic, List<String> keys)
        throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        try (BufferedWriter w = Files.newBufferedWriter(outFile, StandardCharsets.UTF_8)) {
            for (String key : keys) {
                List<MessageExt> found;
                try {
                    QueryResult r = key.startsWith(UNIQ)
                        ? admin.queryMessageByUniqKey(null, topic, key.substring(UNIQ.length()),
                            64, 0, Long.MAX_VALUE)
                        : admin.queryMessage(topic, key, 64, 0, Long.MAX_VALUE);
                    found = r.getMessageList();
                } catch (Exception none) {
                    found = new ArrayList<>();
                }
                if (found.isEmpty()) {
                    w.write(key + "\t-\t-\t-\n");
                }
                for (MessageExt m : found) {
                    w.write(key + "\t" + m.getTopic() + "\t" + m.getQueueId() + "\t"
                        + m.getQueueOffset() + "\n");
                }
            }
        } finally {
            admin.shutdown();
        }
    }

    // -- consume-group ------------------------------------------------------------------
    private static void consumeGroup(String namesrv, String group, String topic, int expected,
        long timeoutMs, Path outFile) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<String> lines = java.util.Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tool-group-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                if (seen.add(m.getQueueId() + "\t" + m.getQueueOffset())) {
                    lines.add(m.getQueueId() + "\t" + m.getQueueOffset());
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (seen.size() < expected) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(group + " got " + seen.size() + " of "
                        + expected + " messages of " + topic);
                }
                Thread.sleep(100);
            }
        } finally {
            consumer.shutdown();
        }
        synchronized (lines) {
            Files.write(outFile, lines, StandardCharsets.UTF_8);
        }
    }

    // -- expire, reset-by-time ----------------------------------------------------------
    private static void expire(String namesrv, String brokerAddr) throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        try {
            java.util.Properties props = new java.util.Properties();
            props.setProperty("fileReservedTime", "0");
            admin.updateBrokerConfig(brokerAddr, props);
            admin.deleteExpiredCommitLogByAddr(brokerAddr);
        } finally {
            admin.shutdown();
        }
    }

    private static void resetByTime(String namesrv, String group, String topic, long timestamp)
        throws Exception {
        DefaultMQAdminExt admin = admin(namesrv);
        try {
            try {
                admin.resetOffsetByTimestamp(topic, group, timestamp, true);
            } catch (org.apache.rocketmq.client.exception.MQClientException e) {
                if (e.getResponseCode() != org.apache.rocketmq.remoting.protocol.ResponseCode.CONSUMER_NOT_ONLINE) {
                    throw e;
                }
                // As mqadmin resetOffsetByTime does for a group with no consumer online:
                // searchOffset per queue, then updateConsumeOffset.
                admin.resetOffsetByTimestampOld(group, topic, timestamp, true);
            }
        } finally {
            admin.shutdown();
        }
    }

    // -- consume --------------------------------------------------------------------------
    private static final class Consume {
        private static final String SQL = "sql:";
        private final Set<String> seen = ConcurrentHashMap.newKeySet();
        private final BufferedWriter out;
        private volatile long lastDelivery = System.currentTimeMillis();

        private Consume(BufferedWriter out) {
            this.out = out;
        }

        private synchronized void record(MessageExt m) {
            try {
                out.write(messageLine(m));
                out.flush();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
            seen.add(m.getQueueId() + "/" + m.getQueueOffset());
            lastDelivery = System.currentTimeMillis();
        }

        private static ConsumeFromWhere where(String from) {
            if (from.equals("first")) {
                return ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET;
            }
            if (from.equals("last")) {
                return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET;
            }
            if (from.startsWith("timestamp:")) {
                return ConsumeFromWhere.CONSUME_FROM_TIMESTAMP;
            }
            return null; // the client's default
        }

        private static String stamp(String from) {
            long ms = Long.parseLong(from.substring("timestamp:".length()));
            return org.apache.rocketmq.common.UtilAll.timeMillisToHumanString3(ms);
        }

        static void run(String namesrv, String mode, String group, String topic, String from,
            String sub, int expected, int fresh, long timeoutMs, Path outFile) throws Exception {
            try (BufferedWriter w = Files.newBufferedWriter(outFile, StandardCharsets.UTF_8)) {
                Consume c = new Consume(w);
                if (mode.startsWith("push")) {
                    c.push(namesrv, group, topic, from, sub, expected, fresh, timeoutMs, mode);
                } else if (mode.equals("lite")) {
                    c.lite(namesrv, group, topic, from, sub, expected, timeoutMs);
                } else {
                    throw new IllegalArgumentException("mode must be push or lite: " + mode);
                }
            }
        }

        private void push(String namesrv, String group, String topic, String from, String sub,
            int expected, int fresh, long timeoutMs, String mode) throws Exception {
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
            if (mode.equals("push-slow")) {
                consumer.setPullBatchSize(8);
                consumer.setPullInterval(200);
            }
            consumer.setNamesrvAddr(namesrv);
            consumer.setInstanceName("tool-consume-" + System.nanoTime());
            ConsumeFromWhere where = where(from);
            if (where != null) {
                consumer.setConsumeFromWhere(where);
            }
            if (where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP) {
                consumer.setConsumeTimestamp(stamp(from));
            }
            if (sub.startsWith(SQL)) {
                consumer.subscribe(topic, MessageSelector.bySql(sub.substring(SQL.length())));
            } else {
                consumer.subscribe(topic, sub);
            }
            if (mode.equals("push-concurrent")) {
                consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                    for (MessageExt m : msgs) {
                        record(m);
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            } else {
                consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
                    for (MessageExt m : msgs) {
                        record(m);
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            }
            consumer.start();
            try {
                long deadline = System.currentTimeMillis() + timeoutMs;
                if (fresh > 0) {
                    int queues = consumer.fetchSubscribeMessageQueues(topic).size();
                    while (consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                        .getProcessQueueTable().size() < queues) {
                        check(deadline, "the consumer to hold every queue of " + topic);
                        Thread.sleep(50);
                    }
                    sendFresh(namesrv, topic, fresh);
                }
                await(expected, deadline);
            } finally {
                consumer.shutdown();
            }
        }

        private void lite(String namesrv, String group, String topic, String from, String sub,
            int expected, long timeoutMs) throws Exception {
            DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
            consumer.setNamesrvAddr(namesrv);
            consumer.setInstanceName("tool-lite-" + System.nanoTime());
            ConsumeFromWhere where = where(from);
            if (where != null) {
                consumer.setConsumeFromWhere(where);
            }
            if (where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP) {
                consumer.setConsumeTimestamp(stamp(from));
            }
            if (sub.startsWith(SQL)) {
                consumer.subscribe(topic, MessageSelector.bySql(sub.substring(SQL.length())));
            } else {
                consumer.subscribe(topic, sub);
            }
            consumer.start();
            try {
                long deadline = System.currentTimeMillis() + timeoutMs;
                while (!done(expected)) {
                    check(deadline, "deliveries");
                    for (MessageExt m : consumer.poll(200)) {
                        record(m);
                    }
                }
            } finally {
                consumer.shutdown();
            }
        }

        private boolean done(int expected) {
            return seen.size() >= expected && System.currentTimeMillis() - lastDelivery > 2000;
        }

        private void check(long deadline, String what) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what + " ("
                    + seen.size() + " distinct offsets delivered; " + perQueue() + ")");
            }
        }

        /** Per queue: how many offsets were delivered, the first one missing, the highest. */
        private String perQueue() {
            Map<Integer, Set<Long>> byQueue = new TreeMap<>();
            for (String key : seen) {
                String[] parts = key.split("/");
                byQueue.computeIfAbsent(Integer.parseInt(parts[0]), q -> new java.util.HashSet<>())
                    .add(Long.parseLong(parts[1]));
            }
            StringBuilder out = new StringBuilder();
            for (Map.Entry<Integer, Set<Long>> e : byQueue.entrySet()) {
                long gap = 0;
                while (e.getValue().contains(gap)) {
                    gap++;
                }
                long max = e.getValue().stream().mapToLong(Long::longValue).max().orElse(-1);
                out.append(String.format("queue %d: %d delivered, first missing %d, highest %d; ",
                    e.getKey(), e.getValue().size(), gap, max));
            }
            return out.append("last delivery ").append(System.currentTimeMillis() - lastDelivery)
                .append(" ms ago").toString();
        }

        private void await(int expected, long deadline) throws InterruptedException {
            while (!done(expected)) {
                check(deadline, "deliveries");
                Thread.sleep(100);
            }
        }

        private static void sendFresh(String namesrv, String topic, int n) throws Exception {
            DefaultMQProducer producer = new DefaultMQProducer("tool_fresh_" + System.nanoTime());
            producer.setNamesrvAddr(namesrv);
            producer.setInstanceName("tool-fresh-" + System.nanoTime());
            producer.start();
            try {
                for (int i = 0; i < n; i++) {
                    producer.send(new Message(topic, "fresh",
                        ("fresh-" + i).getBytes(StandardCharsets.UTF_8)));
                }
            } finally {
                producer.shutdown();
            }
        }
    }
}
