// Shared top bar, so every page links to the others without copying markup.
const LINKS = [
  ["/", "Home"],
  ["/turnbased.html", "Chat"],
  ["/audio_duplex.html", "Audio duplex"],
  ["/omni.html", "Omni (camera)"],
];

export function renderNav(target = document.body) {
  const nav = document.createElement("nav");
  nav.className = "app-nav";
  const here = location.pathname;
  nav.innerHTML = `<a class="brand" href="/">OmniDuplex</a><div class="links"></div>`;
  const links = nav.querySelector(".links");
  for (const [href, label] of LINKS) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = label;
    if (href === here) a.setAttribute("aria-current", "page");
    links.appendChild(a);
  }
  target.prepend(nav);
  return nav;
}
