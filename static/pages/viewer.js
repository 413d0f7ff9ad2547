// The entry module of /viewer.html (an inline script would need 'unsafe-inline' in the CSP).
import { renderNav } from "/static/shared/app-nav.js";
import { mountViewer } from "/static/viewer/viewer.js";
renderNav();
mountViewer();
