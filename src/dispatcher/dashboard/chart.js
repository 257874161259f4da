/* A small line chart in SVG for the sluice dashboard: time on x (seconds before now), one or two
 * series on y from zero. Written for this page; no dependencies. Every text goes in through
 * textContent, so labels that come from users stay text.
 *
 * sluiceChart.draw(box, {title, span, format, series: [{name, points: [[secondsAgo, value]]}]})
 * replaces the content of box (an element) with the chart.
 *
 * Written for sluice, no third-party code in it: it is under sluice's own terms, like the rest of
 * the tree. */
'use strict';

(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const W = 600, H = 160, L = 74, R = 10, T = 10, B = 22;

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* A round upper bound for the y axis: 1, 2 or 5 times a power of ten. */
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function ago(s) {
    if (s === 0) return 'now';
    if (s % 60 === 0) return '-' + s / 60 + ' min';
    return '-' + s + ' s';
  }

  function draw(box, opts) {
    const span = opts.span || 900;
    const format = opts.format || (v => String(v));
    const series = opts.series || [];
    let max = 0, any = false;
    for (const s of series)
      for (const p of s.points) {
        any = true;
        if (p[1] > max) max = p[1];
      }
    max = niceMax(max);
    const x = t => L + (W - L - R) * (1 - Math.min(t, span) / span);
    const y = v => T + (H - T - B) * (1 - v / max);

    const svg = el('svg', {viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none',
                           role: 'img'});
    svg.appendChild(el('title', {}, opts.title || ''));
    for (let i = 0; i <= 4; i++) {
      const v = max * i / 4, yy = y(v);
      svg.appendChild(el('line', {class: i ? 'grid' : 'axis', x1: L, x2: W - R, y1: yy, y2: yy}));
      svg.appendChild(el('text', {x: L - 6, y: yy + 3, 'text-anchor': 'end'}, format(v)));
    }
    const step = span >= 600 ? 300 : span >= 120 ? 60 : 10;
    for (let t = 0; t <= span; t += step)
      svg.appendChild(el('text', {x: x(t), y: H - 6, 'text-anchor': t === span ? 'start' : 'middle'},
                         ago(t)));
    series.forEach((s, i) => {
      const pts = s.points.filter(p => p[0] <= span).sort((a, b) => b[0] - a[0]);
      if (pts.length === 0) return;
      const d = pts.map((p, k) => (k ? 'L' : 'M') + x(p[0]).toFixed(1) + ' ' +
                                  y(p[1]).toFixed(1)).join(' ');
      if (i === 0 && pts.length > 1)
        svg.appendChild(el('path', {class: 'area-0', d: d + ' L' + x(pts[pts.length - 1][0]).toFixed(1) +
                                    ' ' + y(0) + ' L' + x(pts[0][0]).toFixed(1) + ' ' + y(0) + ' Z'}));
      svg.appendChild(el('path', {class: 'series-' + (i % 2), d: d}));
    });
    if (!any)
      svg.appendChild(el('text', {class: 'empty', x: (L + W) / 2, y: H / 2, 'text-anchor': 'middle'},
                         'no samples yet'));

    const wrap = document.createElement('div');
    wrap.className = 'chart';
    const title = document.createElement('div');
    title.className = 'title';
    title.textContent = opts.title || '';
    wrap.appendChild(title);
    wrap.appendChild(svg);
    if (series.length > 1) {
      const legend = document.createElement('div');
      legend.className = 'muted';
      legend.textContent = series.map(s => s.name).join(' / ');
      wrap.appendChild(legend);
    }
    box.replaceChildren(wrap);
  }

  window.sluiceChart = {draw: draw, niceMax: niceMax};
})();
