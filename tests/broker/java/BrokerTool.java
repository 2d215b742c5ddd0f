/*
 * Test-only client for the broker conformance tests (tests/broker/harness.py compiles and
 * runs it against the jars the test POM resolves). It drives a real Apache RocketMQ broker
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
 *   stats NAMESRV BROKER_ADDR OUT TOPIC...
 *       Write the broker's own min/max offsets per queue (getTopicStatsInfo), one line per
 *       queue: topic queueId minOffset maxOffset lastUpdateTimestamp.
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
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
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
            long deadline = System.currentTimeMillis() + 30_000;
            for (String spec : specs) {
                String topic = spec.substring(0, spec.lastIndexOf(':'));
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
        } finally {
            admin.shutdown();
        }
    }

    // -- produce ------------------------------------------------------------------------
    private static final class Planned {
        final int index;
        final String kind;
        final Message message;

        Planned(int index, String kind, Message message) {
            this.index = index;
            this.kind = kind;
            this.message = message;
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
        return new Planned(index, kind, msg);
    }

    private static String resultLine(int index, SendResult r) {
        return index + "\t" + r.getSendStatus() + "\t" + r.getMsgId() + "\t" + r.getOffsetMsgId()
            + "\t" + r.getMessageQueue().getBrokerName() + "\t" + r.getMessageQueue().getQueueId()
            + "\t" + r.getQueueOffset();
    }

    private static void produce(String namesrv, Path plan, Path results) throws Exception {
        List<Planned> plain = new ArrayList<>();
        List<Planned> transactional = new ArrayList<>();
        for (String line : Files.readAllLines(plan, StandardCharsets.UTF_8)) {
            if (line.isEmpty()) {
                continue;
            }
            Planned p = parse(line);
            (p.kind.startsWith("tx_") ? transactional : plain).add(p);
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

        try (BufferedWriter w = Files.newBufferedWriter(results, StandardCharsets.UTF_8)) {
            for (int i = 0; i < plain.size() + transactional.size(); i++) {
                String line = out.get(i);
                if (line == null) {
                    throw new IllegalStateException("no send result for plan line " + i);
                }
                w.write(line);
                w.write('\n');
            }
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
}
