// A Java program with known methods that burn CPU, allocate and contend a monitor, for
// JFR producers to record: the JDK's own Flight Recorder (-XX:StartFlightRecording) and
// Pyroscope's Java agent (async-profiler). With `labels`, the CPU work runs under the
// Pyroscope label `request=checkout` (needs the agent's jar on the class path).
//
//   java JfrWorkload SECONDS [labels]
import io.pyroscope.labels.v2.LabelsSet;
import io.pyroscope.labels.v2.Pyroscope;

public class JfrWorkload {
    static final Object LOCK = new Object();
    static volatile Object sink;
    static volatile long result;

    public static void main(String[] args) throws Exception {
        long seconds = Long.parseLong(args[0]);
        boolean labels = args.length > 1 && args[1].equals("labels");
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread burner = new Thread(() -> {
            while (System.nanoTime() < end) {
                if (labels) {
                    Pyroscope.LabelsWrapper.run(new LabelsSet("request", "checkout"),
                            () -> { result = cpuBurner(); });
                } else {
                    result = cpuBurner();
                }
            }
        }, "jfr-burner");
        Thread allocator = new Thread(() -> {
            while (System.nanoTime() < end) {
                allocateChunks();
            }
        }, "jfr-allocator");
        Thread[] contenders = new Thread[2];
        for (int i = 0; i < contenders.length; i++) {
            contenders[i] = new Thread(() -> {
                while (System.nanoTime() < end) {
                    holdTheLock();
                }
            }, "jfr-contender-" + i);
        }
        burner.start();
        allocator.start();
        for (Thread t : contenders) {
            t.start();
        }
        burner.join();
        allocator.join();
        for (Thread t : contenders) {
            t.join();
        }
        System.out.println("done " + result);
    }

    static long cpuBurner() {
        long x = 17;
        for (int i = 0; i < 2_000_000; i++) {
            x = mixBits(x, i);
        }
        return x;
    }

    static long mixBits(long x, int i) {
        x ^= x << 13;
        x ^= x >>> 7;
        x ^= x << 17;
        return x + i;
    }

    static void allocateChunks() {
        for (int i = 0; i < 64; i++) {
            sink = new byte[64 * 1024];
        }
        try {
            Thread.sleep(1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void holdTheLock() {
        synchronized (LOCK) {
            try {
                Thread.sleep(30);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
