//! What a person sees, measured in the browser: the layout assertions the visual check
//! (`tests/it/layout.rs`) and the phone tests (`tests/it/phones.rs`) make on a page.
//!
//! Each answers with one line per thing wrong, empty when all is well, so a failure names the
//! element and where it lies instead of a screenshot to squint at.

use fantoccini::Client;

/// What a person acts on, on any page: links, buttons and fields in the page's content.
pub const CONTROLS: &str = "main a, main button, main input:not([type=hidden]), main select, main textarea";

fn lines(found: serde_json::Value) -> Vec<String> {
    found
        .as_array()
        .map(|v| v.iter().filter_map(|s| s.as_str()).map(String::from).collect())
        .unwrap_or_default()
}

/// How much wider than the screen the page shown is, in CSS pixels (0 when it fits), and the
/// widest element sticking out, to say what to fix.
pub async fn overflow(browser: &Client) -> (i64, String) {
    let measured = browser
        .execute(
            "const width = window.innerWidth;
             let widest = '';
             let most = width;
             for (const el of document.querySelectorAll('body *')) {
               const right = el.getBoundingClientRect().right;
               if (right > most + 0.5) { most = right; widest = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : ''); }
             }
             return [document.documentElement.scrollWidth - width, widest];",
            vec![],
        )
        .await
        .expect("the page's width");
    let over = measured[0].as_i64().unwrap_or(i64::MAX);
    (over, measured[1].as_str().unwrap_or("").to_string())
}

/// The elements matching `css` on the page shown that a person cannot see whole without
/// scrolling sideways: beyond the screen's left or right edge, or beyond the edges of a box
/// that clips them (`overflow` other than visible, such as a table scrolling in its own box),
/// or cutting their own text. Elements not laid out (hidden) are left out; when `required`,
/// `css` must match at least one that is, so a page that lost what the check is about fails
/// instead of passing.
pub async fn out_of_sight(browser: &Client, css: &str, required: bool) -> Vec<String> {
    let found = browser
        .execute(
            "const [css, required] = arguments;
             const width = window.innerWidth;
             const shown = [...document.querySelectorAll(css)].filter(el => el.getClientRects().length > 0);
             if (required && shown.length === 0) return ['nothing shown matches ' + css];
             const out = [];
             for (const el of shown) {
               const r = el.getBoundingClientRect();
               let left = 0, right = width, clipped = 'the screen';
               for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
                 if (getComputedStyle(a).overflowX === 'visible') continue;
                 const b = a.getBoundingClientRect();
                 if (b.left > left) { left = b.left; clipped = a.tagName.toLowerCase() + '.' + a.className; }
                 if (b.right < right) { right = b.right; clipped = a.tagName.toLowerCase() + '.' + a.className; }
               }
               const what = el.tagName.toLowerCase() + ' \"' + String(el.textContent || el.value || el.getAttribute('aria-label') || '').trim().replace(/\\s+/g, ' ').slice(0, 50) + '\"';
               if (r.left < left - 0.5 || r.right > right + 0.5) {
                 out.push(what + ' spans ' + Math.round(r.left) + '–' + Math.round(r.right) + ' px, ' + clipped + ' shows ' + Math.round(left) + '–' + Math.round(right));
               } else if (!['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName) && el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible') {
                 out.push(what + ' cuts its own text');
               }
             }
             return [...new Set(out)];",
            vec![serde_json::json!(css), serde_json::json!(required)],
        )
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    lines(found)
}

/// The tables on the page shown whose cells do not sit under their headers: for every table
/// laid out as a table, each cell's left edge where its column's header starts and its right
/// edge where the header of its last column ends (colspans counted). With `all_tables`, a table
/// in the page's content laid out as anything else (the phone's cards, say) is wrong too: that
/// is the desktop's rule.
pub async fn misaligned_tables(browser: &Client, all_tables: bool) -> Vec<String> {
    let found = browser
        .execute(
            "const [allTables] = arguments;
             const out = [];
             const text = el => String(el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 30);
             const shown = el => el.getClientRects().length > 0;
             [...document.querySelectorAll('main table')].filter(shown).forEach((table, n) => {
               const name = 'table' + (table.id ? '#' + table.id : '') + (table.className ? '.' + table.className.replace(/ /g, '.') : '') + ' (' + (n + 1) + ')';
               const display = getComputedStyle(table).display;
               if (display !== 'table') {
                 if (allTables) out.push(name + ' is laid out as display: ' + display + ', not as a table');
                 return;
               }
               const rows = [...table.rows].filter(shown);
               const head = rows.find(r => [...r.cells].every(c => c.tagName === 'TH'));
               if (!head) return;
               const starts = new Map(), ends = new Map();
               let col = 0;
               for (const th of head.cells) {
                 const r = th.getBoundingClientRect();
                 starts.set(col, [r.left, th]);
                 col += th.colSpan;
                 ends.set(col - 1, [r.right, th]);
               }
               for (const row of rows) {
                 if (row === head) continue;
                 let c = 0;
                 for (const cell of row.cells) {
                   const r = cell.getBoundingClientRect();
                   const first = c, last = c + cell.colSpan - 1;
                   c += cell.colSpan;
                   if (!shown(cell)) continue;
                   const start = starts.get(first), end = ends.get(last);
                   const off = (start && Math.abs(r.left - start[0]) > 1) || (end && Math.abs(r.right - end[0]) > 1);
                   if (off) {
                     const under = [...document.elementsFromPoint(r.left + r.width / 2, head.getBoundingClientRect().top + 2)].find(e => e.tagName === 'TH');
                     out.push(name + ': \"' + text(cell) + '\" (column ' + (first + 1) + ', \"' + text((start || end)[1]) + '\") spans ' + Math.round(r.left) + '–' + Math.round(r.right) + ' px, its header ' + Math.round(start ? start[0] : r.left) + '–' + Math.round(end ? end[0] : r.right) + (under ? '; above it: \"' + text(under) + '\"' : ''));
                   }
                 }
               }
             });
             return out;",
            vec![serde_json::json!(all_tables)],
        )
        .await
        .expect("the tables' boxes");
    lines(found)
}

/// The words on the page shown cut in two across lines ("Descr/iption", "resou/rce"): a run of
/// Latin letters and digits whose text spans two lines. A break at a hyphen, a slash or a space
/// is a break between words; Japanese, which breaks between any two characters, is not looked
/// at. A word too long for its line is cut too, and counts: it needs a wider box, not a cut.
pub async fn words_cut(browser: &Client) -> Vec<String> {
    let found = browser
        .execute(
            "const out = [];
             const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
             const range = document.createRange();
             const word = /[\\p{Script=Latin}\\p{Nd}]{2,}/gu;
             while (walker.nextNode()) {
               const node = walker.currentNode;
               const el = node.parentElement;
               if (!el || el.closest('script, style, option, textarea, svg, [hidden]') || el.getClientRects().length === 0) continue;
               for (const m of node.data.matchAll(word)) {
                 range.setStart(node, m.index);
                 range.setEnd(node, m.index + m[0].length);
                 const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
                 if (tops.size > 1) {
                   const inside = el.closest('td, th, li, p, dd, dt, label, button, a, h1, h2, h3, div') || el;
                   const around = node.data.slice(Math.max(0, m.index - 20), m.index + m[0].length + 20).replace(/\\s+/g, ' ');
                   out.push('\"' + m[0] + '\" cut across ' + tops.size + ' lines (…' + around + '…), in ' + inside.tagName.toLowerCase() + (inside.className ? '.' + inside.className : '') + ' ' + Math.round(inside.getBoundingClientRect().width) + ' px wide');
                 }
               }
             }
             return [...new Set(out)];",
            vec![],
        )
        .await
        .expect("the words' boxes");
    lines(found)
}

/// Text squeezed into a sliver: a paragraph, list item, cell or button under 120 px wide that
/// holds a sentence (40 characters or more) over four lines or more, a word or two a line (an
/// incomplete batch run's reasons on a phone's card were one to three letters a line).
pub async fn squeezed_text(browser: &Client) -> Vec<String> {
    let found = browser
        .execute(
            "const out = [];
             for (const el of document.querySelectorAll('main p, main li, main td, main th, main dd, main button')) {
               if (el.getClientRects().length === 0) continue;
               const text = String(el.innerText || '').trim().replace(/\\s+/g, ' ');
               const style = getComputedStyle(el);
               const width = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
               const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.5;
               const lines = Math.round((el.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom)) / line);
               if (width < 120 && text.length >= 40 && lines >= 4) {
                 out.push(el.tagName.toLowerCase() + ' \"' + text.slice(0, 40) + '…\" squeezed into ' + Math.round(width) + ' px, ' + lines + ' lines');
               }
             }
             return out;",
            vec![],
        )
        .await
        .expect("the text's boxes");
    lines(found)
}

/// The tables on the page shown too wide for their box, so that part of them is seen only by
/// scrolling it sideways: on a desktop, a table has the room to show whole.
pub async fn tables_scrolled(browser: &Client) -> Vec<String> {
    let found = browser
        .execute(
            "return [...document.querySelectorAll('main div.scroll')]
               .filter(box => box.getClientRects().length > 0 && box.scrollWidth > box.clientWidth + 1)
               .map(box => { const t = box.querySelector('table');
                 return (t ? 'table' + (t.id ? '#' + t.id : '') + (t.className ? '.' + t.className.replace(/ /g, '.') : '') : 'a box')
                   + ' is ' + box.scrollWidth + ' px wide in a box of ' + box.clientWidth + ' px'; });",
            vec![],
        )
        .await
        .expect("the tables' boxes");
    lines(found)
}
