// Package knowledge owns quarry's reading of Splunk .conf files and the
// index-time rules of a configuration bundle (SPEC §5): how a /raw body
// splits into events and where each event's timestamp is. It is a pure
// library: standard library only, no I/O beyond LoadDir.
//
// # The .conf parser
//
// ParseConf is the one parser for every .conf file (the search-time
// knowledge bundle will use it too): [stanza] headers, key = value
// (whitespace around both trimmed; the first '=' separates), '#' comment
// lines (after optional leading blanks; no trailing comments), blank lines,
// and a line whose last non-blank character is '\' continued on the next
// line, the two joined with "\n" as Splunk does. Settings before any header
// belong to "default". A stanza header written twice is one stanza; a key
// set twice in a stanza keeps the last value. Anything else — a header
// without its ']', an empty [], a line without '=' or with an empty key —
// is an error "NAME:LINE: what".
//
// # Index-time keys
//
// ParseIndexRules applies these props.conf keys and validates each when
// the bundle loads (errors "props.conf:LINE: KEY: what", all of them, not
// just the first):
//
//   - LINE_BREAKER (default ([\r\n]+)): a regular expression with at least
//     one capture group; the first group is the delimiter that is dropped,
//     what the match holds before it ends the previous line, what it holds
//     after it starts the next. Go's RE2 has no lookahead or lookbehind, so
//     Splunk's usual ([\r\n]+)(?=\d{4}-) is refused with a message that
//     suggests ([\r\n]+)\d{4}- , which splits the same way.
//   - SHOULD_LINEMERGE, BREAK_ONLY_BEFORE (regex matched against each line),
//     BREAK_ONLY_BEFORE_DATE (default true: a line in which a timestamp is
//     found by the rule's own TIME_PREFIX/TIME_FORMAT starts an event, also
//     when DATETIME_CONFIG makes the event time the arrival time),
//     MAX_EVENTS (default 256 lines per merged event). The other merging
//     keys (MUST_BREAK_AFTER, MUST_NOT_BREAK_*, BREAK_ONLY_AFTER) are not
//     supported and are ignored like any unknown key.
//   - TRUNCATE (default 10000 bytes, 0 = no limit): applied to each final
//     event, cut back to a UTF-8 rune boundary.
//   - TIME_PREFIX (regex), MAX_TIMESTAMP_LOOKAHEAD (default 128 bytes; 0 or
//     -1 = no limit), TIME_FORMAT (strptime, below), TZ (an IANA zone name
//     for time.LoadLocation, which falls back to the database embedded by
//     time/tzdata on a machine without one, so a minimal container accepts
//     the same zones; "local" is refused since it differs per machine),
//     DATETIME_CONFIG (CURRENT or NONE → the caller's arrival
//     time; empty or /etc/datetime.xml → find the timestamp; a custom
//     datetime.xml is refused).
//   - MAX_DAYS_AGO, MAX_DAYS_HENCE (days, >= 0): a timestamp found further
//     from now is skipped and the search goes on to the next candidate
//     (not checked when now is the zero time).
//     Deviation: Splunk's defaults are 2000 and 2; quarry's default is no
//     limit, so backfilled or future-dated data keeps its own time unless
//     the bundle asks otherwise. Splunk's fallback to the previous event's
//     time is not done: with no timestamp found the caller uses arrival time.
//   - priority, in [source::] and [host::] stanzas (see below).
//
// An empty value sets a key back to its default (over lower layers). Every
// other key — search-time ones such as EXTRACT-x, REPORT-x, KV_MODE, and
// index-time ones quarry does not implement (TRANSFORMS-x, SEDCMD-x,
// INDEXED_EXTRACTIONS, TIMESTAMP_FIELDS, CHARSET, ...) — is left out of the
// index rules without error, and a stanza that sets none of the keys above
// does not count as applying. transforms.conf is checked for syntax only;
// files other than props.conf and transforms.conf count in the hash and
// are otherwise ignored. IndexRules.Hash is the Files' hash, "" only for
// empty or nil Files (the built-ins alone).
//
// # Which stanzas apply
//
// For(sourcetype, source, host) layers, lowest first: [default], the
// built-in stanza of the sourcetype, the user's [SOURCETYPE], matching
// [host::P], matching [source::P]; each key comes from the highest layer
// that sets it. Patterns match the whole value: "..." matches anything, "*"
// anything but '/' or '\', "|" and "( )" alternate, a leading "(?i)" ignores
// case, "\\" is one backslash, every other byte is literal. Among several
// matching host (or source) stanzas, the higher priority wins; a literal
// pattern has priority 100 and a wildcard 0 unless priority is set; then
// the ASCII-first stanza name wins. [rule::] and [delayedrule::] stanzas
// (sourcetype recognition) are ignored. When nothing applies For returns nil and the caller keeps
// its old behaviour (one event per line, arrival time); a nil *Rule behaves
// the same. Rules are precomputed per sourcetype when the bundle has no
// host or source stanzas, and cached per (sourcetype, source, host) in a
// cache of 4096 entries (cleared when full) otherwise.
//
// Built-in sourcetypes (a user stanza of the same name is layered over
// them key by key): access_combined (one event per line, TIME_PREFIX \[,
// TIME_FORMAT %d/%b/%Y:%H:%M:%S %z), syslog (one event per line, TIME_FORMAT
// %b %d %H:%M:%S at the start, MAX_TIMESTAMP_LOOKAHEAD 32), _json and json
// (one event per line; the time is the first value of a "timestamp",
// "time" or "@timestamp" key that parses — a string in a built-in format or
// epoch seconds/milliseconds — found by a simple tolerant scan, not a JSON
// parser; a TIME_PREFIX or TIME_FORMAT set for them replaces the scan).
//
// Deviation: Splunk's default SHOULD_LINEMERGE is true; quarry's is false
// (one event per line), because quarry's /raw has always given one event
// per line. Only stanzas the user writes with SHOULD_LINEMERGE = true merge.
//
// # Timestamps
//
// Time searches after the TIME_PREFIX match (none: ok=false) within the
// lookahead window, at each token start (a digit not after a digit, a
// letter not after a letter, or whatever the format's first literal is),
// earliest first, for the first place TIME_FORMAT parses — so unlike Splunk
// the format need not sit right at the prefix. The whole timestamp must lie
// within the window. A TIME_FORMAT that parses nowhere gives ok=false; the
// built-in formats are not tried in its stead. Without TIME_FORMAT the
// built-in formats are tried at each place: ISO 8601 / RFC 3339 (2006-01-02T15:04:05, 'T' or ' ',
// optional .fraction or ,fraction, optional Z, ±hh, ±hhmm or ±hh:mm),
// access log (02/Jan/2006:15:04:05 -0700), syslog (Jan _2 15:04:05),
// epoch seconds (exactly 10 digits, optional .fraction) and epoch
// milliseconds (exactly 13 digits). The zone is the text's when it has one,
// else TZ, else UTC. A year the text lacks is now's, or the year before if
// that would put the time more than two days after now; a format without a
// date takes now's date. Results are in UTC.
//
// TIME_FORMAT directives: %Y (4 digits) %y (2 digits, 69-99 → 19xx) %m %d
// %e (space-padded day) %H %k (space-padded hour) %I %p (AM/PM) %M %S %j
// (day of year) %b %h %B (month name or abbreviation, any case) %a %A
// (weekday, read and ignored) %z %:z %::z (Z, ±hh, ±hhmm, ±hh:mm,
// ±hh:mm:ss) %Z (an unambiguous abbreviation such as UTC, GMT, EST, PDT,
// CET, JST, or UTC/GMT followed by an offset; an unknown word is skipped and
// TZ applies) %s (epoch seconds, up to 10 digits, so %s%3N reads epoch
// milliseconds) %N (subseconds, 9 digits by default; %3N %6N %9N; as Splunk
// documents) %Q (subseconds, 3 digits by default; %6Q %9Q) %f (up to 6
// digits of subseconds) %T (%H:%M:%S) %F (%Y-%m-%d) %D (%m/%d/%y) %R
// (%H:%M) %% (a literal %). Subsecond digits are a decimal fraction: ".12"
// read by %3N is 120 ms. Numeric fields read up to their width and at
// least one digit. Whitespace in the format matches one or more whitespace
// bytes; every other byte must match exactly. Any other directive
// (locale ones such as %c %x %X %+, Splunk's %Ez, a width on anything but
// %N/%Q) is an error when the bundle loads, as is a format without a date
// or time directive.
//
// # Cost
//
// Events with the default LINE_BREAKER finds line ends with vectorised
// byte searches and allocates nothing; Time with no TIME_PREFIX, a literal
// one or "^" allocates nothing. A custom LINE_BREAKER that cannot match
// empty, has no ^ $ \b \B \A \z and whose matches start with at most four
// ASCII bytes (([\r\n]+)\d{4}- does) is tried only at those bytes, one
// small allocation per match; any other custom LINE_BREAKER is one regexp
// search over the body (an allocation per match and the NFA's cost per
// byte). A regular-expression TIME_PREFIX costs one allocation per event.
// BenchmarkEventsTime measures nanoseconds per event.
package knowledge
