package kubetest

import (
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
)

// MetricValue returns the value of the counter or gauge name whose labels include want, and
// false when the registry has no such series.
func MetricValue(reg metrics.Gatherer, name string, want map[string]string) (float64, bool, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, false, fmt.Errorf("gathering metrics: %w", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true, nil
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true, nil
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true, nil
			}
		}
	}
	return 0, false, nil
}

// MetricSum returns the sum of all series of the counter name (0 when there are none).
func MetricSum(reg metrics.Gatherer, name string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
