package io.tieredstore.broker;

import java.util.HashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What the plugin did, shown in the broker's runtime info ({@code mqadmin brokerStatus},
 * keys {@code tieredstore*}).
 */
final class Counters {
    final AtomicLong coldPulls = new AtomicLong();
    final AtomicLong coldMessages = new AtomicLong();
    final AtomicLong coldBytes = new AtomicLong();
    final AtomicLong sidecarErrors = new AtomicLong();
    final AtomicLong pausedPulls = new AtomicLong();

    void putInto(HashMap<String, String> info) {
        info.put("tieredstoreColdPulls", String.valueOf(coldPulls.get()));
        info.put("tieredstoreColdMessages", String.valueOf(coldMessages.get()));
        info.put("tieredstoreColdBytes", String.valueOf(coldBytes.get()));
        info.put("tieredstoreSidecarErrors", String.valueOf(sidecarErrors.get()));
        info.put("tieredstorePausedPulls", String.valueOf(pausedPulls.get()));
    }
}
