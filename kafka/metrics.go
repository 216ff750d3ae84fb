package kafka

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// serverMetrics are the listener's Prometheus series: requests, errors by
// error code, latency and bytes in and out per API, connections.
type serverMetrics struct {
	requests    *prometheus.CounterVec
	errors      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	bytesIn     *prometheus.CounterVec
	bytesOut    *prometheus.CounterVec
	connections prometheus.Gauge
	refused     *prometheus.CounterVec
	closed      *prometheus.CounterVec
	isrReads    *prometheus.CounterVec
	groupTopics prometheus.Counter
}

func newServerMetrics(labels prometheus.Labels) *serverMetrics {
	return &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_requests_total", Help: "Kafka requests served, by API.", ConstLabels: labels,
		}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_errors_total", Help: "Kafka error codes answered (per partition or topic where the API answers so), by API and code.", ConstLabels: labels,
		}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "parkway_kafka_request_seconds", Help: "Time from a request read to its response written, by API.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), ConstLabels: labels,
		}, []string{"api"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_received_bytes_total", Help: "Request bytes read, size prefixes included, by API.", ConstLabels: labels,
		}, []string{"api"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_sent_bytes_total", Help: "Response bytes written, size prefixes included, by API.", ConstLabels: labels,
		}, []string{"api"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parkway_kafka_connections", Help: "Open client connections.", ConstLabels: labels,
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_connections_refused_total", Help: "Connections closed at accept, by reason.", ConstLabels: labels,
		}, []string{"reason"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_connections_closed_total", Help: "Connections the server closed on bad input or a fault, by reason.", ConstLabels: labels,
		}, []string{"reason"}),
		isrReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "parkway_kafka_isr_reads_total", Help: "Partition leaders asked for their in-sync replicas (in a cluster, by the Metadata cache's refresher), by result.", ConstLabels: labels,
		}, []string{"result"}),
		groupTopics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parkway_kafka_group_topic_reads_total", Help: "Subscribed topics read from the metadata for consumer group (KIP-848) heartbeats.", ConstLabels: labels,
		}),
	}
}

func (m *serverMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.errors, m.latency, m.bytesIn, m.bytesOut, m.connections, m.refused, m.closed, m.isrReads, m.groupTopics}
}

// Describe implements prometheus.Collector.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func apiName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" {
		return name
	}
	return "unknown"
}

func (m *serverMetrics) countError(key int16, code int16) {
	if code != 0 {
		m.errors.WithLabelValues(apiName(key), strconv.Itoa(int(code))).Inc()
	}
}
