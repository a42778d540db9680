package query

import "github.com/RoaringBitmap/roaring/v2"

// Segment is one searchable bucket copy as the search executor reads it.
//
// Events are numbered by bucket-local ordinals 0..Len()-1 in journal order;
// the ordinal is the event's _cd. Every bitmap a Segment returns is owned by
// the Segment and must not be modified by the caller (clone it first).
// Implementations must be safe for concurrent readers; a hot bucket's
// Segment is a consistent snapshot of the events indexed when it was taken.
type Segment interface {
	// BucketID is the bucket id, <index>~<localid>~<originPeerGUID>.
	BucketID() string
	// Index is the index the bucket belongs to.
	Index() string
	// Len is the number of events in this snapshot of the copy.
	Len() uint32
	// Bounds returns the earliest and latest _time (unix ns, inclusive) of the
	// events. An empty segment returns (0, -1).
	Bounds() (earliest, latest int64)
	// Times returns every event's _time in unix ns, indexed by ordinal.
	Times() ([]int64, error)
	// MayContain reports whether a term may occur in _raw; false is definite.
	// It is the bloom-filter check that lets a search skip a bucket before
	// touching its term dictionary.
	MayContain(term string) bool
	// Term returns the events whose _raw contains term, a token as Tokenize
	// produces it (lowercased). It returns nil, nil when the term is absent.
	Term(term string) (*roaring.Bitmap, error)
	// TermsWithPrefix calls fn for every term starting with prefix, in
	// ascending byte order, until fn returns false (wildcards such as err*).
	TermsWithPrefix(prefix string, fn func(term string, events *roaring.Bitmap) bool) error
	// IndexedFields lists the fields with postings: host, source, sourcetype
	// and the HEC indexed fields present in this bucket, sorted.
	IndexedFields() []string
	// FieldValue returns the events whose indexed field equals value exactly
	// (values are case-sensitive, as Splunk's indexed fields are); nil, nil
	// when none.
	FieldValue(field, value string) (*roaring.Bitmap, error)
	// FieldValues calls fn for every value of an indexed field with its
	// events, in ascending byte order of value, until fn returns false.
	FieldValues(field string, fn func(value string, events *roaring.Bitmap) bool) error
	// Events decodes the events with the given ordinals in ascending ordinal
	// order and calls fn for each until it returns false. ev is only valid
	// during the call. A nil bitmap means every event.
	Events(ordinals *roaring.Bitmap, fn func(ord uint32, ev *Event) bool) error
}

// Event is one indexed event as a Segment returns it.
type Event struct {
	Time       int64 // _time, unix nanoseconds, UTC
	Raw        string
	Host       string
	Source     string
	Sourcetype string
	Index      string
	Fields     []Field // HEC indexed fields, in the order they were sent
}

// Field is one indexed field of an event.
type Field struct {
	Name  string
	Value string
}

// RawSource is an optional extra a Segment may implement: the _raw of the
// events with the given ordinals (nil: every event), in ascending ordinal
// order, without building their other fields. A count whose search
// expression looks at _raw alone (`"POST /api/v1/cart" | stats count`)
// verifies its candidates through it. raw is only valid during the call.
type RawSource interface {
	RawEvents(ordinals *roaring.Bitmap, fn func(ord uint32, raw []byte) bool) error
}
