package knowledge_test

import (
	"fmt"
	"time"

	"github.com/quarry-dev/quarry/knowledge"
)

func ExampleParseIndexRules() {
	rules, err := knowledge.ParseIndexRules(knowledge.Files{"props.conf": []byte(`
[java_app]
SHOULD_LINEMERGE = true
BREAK_ONLY_BEFORE = ^\d{4}-\d{2}-\d{2}
TIME_FORMAT = %Y-%m-%d %H:%M:%S.%3N
TZ = Europe/Paris
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	body := []byte("2026-03-04 05:06:07.250 ERROR boom\n\tat a.B.c(B.java:1)\n2026-03-04 05:06:08.000 INFO ok\n")
	rule := rules.For("java_app", "/var/log/app.log", "web-01")
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	_ = rule.Events(body, func(raw []byte) error {
		t, ok := rule.Time(raw, now)
		fmt.Printf("%s %v %q\n", t.Format(time.RFC3339Nano), ok, raw)
		return nil
	})

	_, err = knowledge.ParseIndexRules(knowledge.Files{"props.conf": []byte("[x]\nLINE_BREAKER = ([\\r\\n]+)(?=\\d{4}-)\nTIME_FORMAT = %Y %K\n")})
	fmt.Println(err)
	// Output:
	// 2026-03-04T04:06:07.25Z true "2026-03-04 05:06:07.250 ERROR boom\n\tat a.B.c(B.java:1)"
	// 2026-03-04T04:06:08Z true "2026-03-04 05:06:08.000 INFO ok"
	// props.conf:2: LINE_BREAKER: "([\\r\\n]+)(?=\\d{4}-)" uses (?=: Go's RE2 regular expressions have no lookahead or lookbehind; write what must follow the delimiter after the first capture group instead, e.g. ([\r\n]+)\d{4}- : the first group is the dropped delimiter, the rest of the match starts the next event
	// props.conf:3: TIME_FORMAT: unknown directive %K
}
