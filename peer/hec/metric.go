package hec

import (
	"bytes"
	"math"
	"strconv"

	"github.com/quarry-dev/quarry/peer/store"
)

// Metric events: Splunk's HEC metrics format on /services/collector/event
// (issue 29). An envelope whose "event" is the string "metric" and whose
// "fields" name a measure is a metric data point:
//
//   - one measure: "metric_name": NAME and "_value": NUMBER;
//   - several (Splunk 8's multiple-measurement format): one
//     "metric_name:NAME": NUMBER per measure;
//   - every other field is a dimension (region, host group, …).
//
// quarry keeps events only, so a data point becomes one event per measure,
// each with the indexed fields metric_name=NAME and _value=NUMBER plus
// every dimension, and the text "metric_name=NAME _value=NUMBER dim=value
// …" as its _raw (full-text search finds it; the fields need no
// extraction): `metric_name=cpu.usr | stats avg(_value) by region`. The
// data point's time, host, source, sourcetype and index apply to each.
// A measure that is not a finite number, a metric_name without _value (or
// the reverse), an empty NAME, or a data point that would expand to more
// than maxMetricFields fields is refused whole, as Splunk does, with code
// 15 "Error in handling indexed fields". `_value` on any other event is
// refused likewise (it is the measure's name; validFieldName refuses every
// other _ name).

// maxMetricFields bounds the fields one data point expands to (measures ×
// (dimensions + 2)): a body's fields could otherwise multiply.
const maxMetricFields = 10000

var (
	metricEvent     = []byte("metric")
	metricNameField = []byte("metric_name")
	metricNameColon = []byte("metric_name:")
	valueField      = []byte("_value")
)

// isMetric reports whether an envelope's event is a metric data point.
func isMetric(e *store.Event) bool {
	if !bytes.Equal(e.Raw, metricEvent) {
		return false
	}
	for _, f := range e.Fields {
		if bytes.Equal(f.Name, metricNameField) || bytes.HasPrefix(f.Name, metricNameColon) {
			return true
		}
	}
	return false
}

// hasValueField reports whether fields carry _value.
func hasValueField(fields []store.Field) bool {
	for _, f := range fields {
		if bytes.Equal(f.Name, valueField) {
			return true
		}
	}
	return false
}

type measure struct{ name, value []byte }

// metricMeasures splits a data point's fields into its measures and its
// dimensions, or reports it malformed.
func metricMeasures(fields []store.Field) (ms []measure, dims []store.Field, ok bool) {
	var single measure
	hasName, hasValue := false, false
	for _, f := range fields {
		switch {
		case bytes.Equal(f.Name, metricNameField):
			if hasName {
				return nil, nil, false
			}
			single.name, hasName = f.Value, true
		case bytes.Equal(f.Name, valueField):
			if hasValue {
				return nil, nil, false
			}
			single.value, hasValue = f.Value, true
		case bytes.HasPrefix(f.Name, metricNameColon):
			ms = append(ms, measure{name: f.Name[len(metricNameColon):], value: f.Value})
		default:
			dims = append(dims, f)
		}
	}
	if hasName != hasValue {
		return nil, nil, false
	}
	if hasName {
		ms = append([]measure{single}, ms...)
	}
	for _, m := range ms {
		v, err := strconv.ParseFloat(string(m.value), 64)
		if len(m.name) == 0 || err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, nil, false
		}
	}
	if len(ms)*(len(dims)+2) > maxMetricFields {
		return nil, nil, false
	}
	return ms, dims, true
}

// addMetric appends a metric data point's events, one per measure (the
// envelope's index was checked by the caller); it returns the reply that
// refuses it, false, when it may not be stored.
func (d *decoder) addMetric(env *pendingEnvelope, maxEvent int) (Reply, bool) {
	n := env.n
	ms, dims, ok := metricMeasures(env.e.Fields)
	if !ok {
		return replyBadFields.at(n), false
	}
	for _, m := range ms {
		start := len(d.fields)
		d.fields = append(d.fields, store.Field{Name: metricNameField, Value: m.name}, store.Field{Name: valueField, Value: m.value})
		d.fields = append(d.fields, dims...)
		ev := env.e
		ev.Fields = d.fields[start:len(d.fields):len(d.fields)]
		off := len(d.raws)
		for i, f := range ev.Fields {
			if i > 0 {
				d.raws = append(d.raws, ' ')
			}
			d.raws = append(d.raws, f.Name...)
			d.raws = append(d.raws, '=')
			if bytes.ContainsAny(f.Value, " \t\r\n\"=") || len(f.Value) == 0 {
				d.raws = strconv.AppendQuote(d.raws, string(f.Value))
			} else {
				d.raws = append(d.raws, f.Value...)
			}
		}
		ev.Raw = d.raws[off:len(d.raws):len(d.raws)]
		if eventSize(&ev) > maxEvent {
			return replyInvalidFormat.at(n), false
		}
		d.evs = append(d.evs, ev)
		if d.charge != nil {
			if rp := d.chargeGrowth(); rp != nil {
				return *rp, false
			}
		}
	}
	d.valuesCap = max(d.valuesCap, env.vals)
	return Reply{}, true
}
