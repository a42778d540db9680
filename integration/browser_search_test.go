//go:build browser

package integration

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quarry-dev/quarry/internal/browsertest"
)

// TestBrowserSearchPageOnSearchHead: the search page a search head serves
// at / searches the cluster through that head — every ingested event, the
// summary naming the head's generation and site — and a syntax error is
// shown with its position.
func TestBrowserSearchPageOnSearchHead(t *testing.T) {
	c := Start(t, Options{})
	raws := searchIngest(t, c, "page", 400)
	sh := c.StartSearchHead("sh1", "site1")
	ctx := browsertest.New(t, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate(sh.URL()+"/?range=all&q="+url.QueryEscape("* | stats count"))); err != nil {
		t.Fatal(err)
	}
	var text string
	browsertest.Poll(t, 30*time.Second, func() error {
		if err := browsertest.Eval(ctx, `document.body.innerText`, &text); err != nil {
			return err
		}
		if !strings.Contains(text, fmt.Sprint(len(raws))) || !strings.Contains(text, "generation") {
			return fmt.Errorf("the page does not show the count %d and the summary yet: %q", len(raws), text)
		}
		return nil
	})
	browsertest.Screenshot(t, ctx, "search-on-searchhead.png")
	if err := chromedp.Do(ctx, chromedp.Navigate(sh.URL()+"/?range=all&q="+url.QueryEscape("* | stats cuont(x) by"))); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 30*time.Second, func() error {
		if err := browsertest.Eval(ctx, `document.body.innerText`, &text); err != nil {
			return err
		}
		if !strings.Contains(text, "column") {
			return fmt.Errorf("no syntax error with its column on the page")
		}
		return nil
	})
}
