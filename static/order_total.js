// The order form's running total, as the customer types quantities: the prices on the page
// times the quantities, added up. Only a guide: the order's own answer (the server's, under the
// stock rows' locks) is what counts, and the page says so. Without script the form works as
// before, with no total.
(function () {
  "use strict";
  var form = document.getElementById("order-form");
  var total = document.getElementById("order-total");
  if (!form || !total) return;
  var fields = form.querySelectorAll("input[data-price-cents]");
  // Written as the server writes a price (`Lang::price`): 1,234.50 USD.
  function price(cents) {
    var whole = String(Math.floor(cents / 100)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return whole + "." + String(cents % 100).padStart(2, "0") + " " + total.dataset.currency;
  }
  function update() {
    var cents = 0;
    fields.forEach(function (field) {
      var quantity = Number(field.value);
      if (Number.isInteger(quantity) && quantity > 0) cents += quantity * Number(field.dataset.priceCents);
    });
    total.textContent = total.dataset.text.replace("%{total}", price(cents));
    total.hidden = false;
  }
  form.addEventListener("input", update);
  update();
})();
